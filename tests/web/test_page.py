"""The page, its static files and the options route, over HTTP (no browser)."""

from serve_helpers import call


def test_page_is_html_with_the_form_and_stays_open_when_keys_are_set(server):
    reply = call("GET", f"{server.url}/")
    assert reply.status == 200
    assert reply.headers["content-type"].startswith("text/html")
    page = reply.body.decode()
    for needle in ('<form id="create-form"', 'id="prompt"', 'id="width"', 'id="height"', 'id="num_frames"',
                   'id="steps"', 'id="seed"', 'id="generate"', 'src="/static/app.js"', 'href="/static/app.css"'):
        assert needle in page, needle
    assert "http://" not in page and "https://" not in page  # nothing fetched from elsewhere


def test_static_files_have_their_content_types(server):
    for path, kind in (("/static/app.js", "javascript"), ("/static/app.css", "text/css"),
                       ("/static/index.html", "text/html")):
        reply = call("GET", f"{server.url}{path}")
        assert reply.status == 200, path
        assert kind in reply.headers["content-type"], (path, reply.headers["content-type"])
        assert b"https://" not in reply.body, path
    assert call("GET", f"{server.url}/static/missing.js").status == 404


def test_options_name_the_model_defaults_and_allowed_values(server):
    reply = call("GET", f"{server.url}/v1/pipedit/options")
    assert reply.status == 200
    options = reply.json()
    assert options["model"] == "hunyuan-demo"
    assert options["defaults"] == {"width": 64, "height": 64, "num_frames": 5, "fps": 24, "num_inference_steps": 2,
                                   "guidance_scale": 6.0, "seed": 0}
    assert options["size_multiple"] == 16 and options["max_side"] == 1920
    assert options["frame_counts"][:4] == [1, 5, 9, 13] and options["frame_counts"][-1] == 257
    assert all((n - 1) % 4 == 0 for n in options["frame_counts"])
    assert options["max_steps"] == 100
    assert options["api_key_required"] is False
    assert (options["takes_image"], options["needs_image"], options["takes_negative_prompt"]) == (False, False, False)
