"""Reading prompts files: formats, names, keys and per-line errors (no model needed)."""

import pytest
from render_helpers import write_jsonl

from pipedit.config import GenerationDefaults
from pipedit.errors import UserInputError
from pipedit.render.prompts import read_lines

DEFAULTS = GenerationDefaults(height=64, width=64, num_frames=5, steps=2, seed=7)


def test_jsonl_lines_resolve_over_defaults_and_skip_comments(tmp_path):
    path = write_jsonl(tmp_path / "p.jsonl", [
        "# a comment", "", {"prompt": "A Red Fox!", "size": "128x64", "seed": 3},
        {"prompt": "waves", "height": 32, "width": 48, "name": "sea_1", "num_frames": 9, "steps": 4},
    ])
    first, second = read_lines(path, DEFAULTS, "m")
    assert (first.number, first.name, first.error) == (3, "0003-a-red-fox", None)
    assert {k: first.settings[k] for k in ("width", "height", "seed", "num_frames", "steps")} == \
        {"width": 128, "height": 64, "seed": 3, "num_frames": 5, "steps": 2}
    assert (second.name, second.settings["height"], second.settings["width"]) == ("sea_1", 32, 48)
    assert second.settings["seed"] == 7  # the run's seed for lines without one


def test_guidance_scale_2_comes_from_the_line_or_the_defaults_and_only_then(tmp_path):
    from dataclasses import replace

    path = write_jsonl(tmp_path / "p.jsonl", [{"prompt": "a"}, {"prompt": "b", "guidance_scale_2": 2}])
    plain, given = read_lines(path, DEFAULTS, "m")
    assert "guidance_scale_2" not in plain.settings and given.settings["guidance_scale_2"] == 2.0
    defaulted, overridden = read_lines(path, replace(DEFAULTS, guidance_scale_2=3.0), "m")
    assert (defaulted.settings["guidance_scale_2"], overridden.settings["guidance_scale_2"]) == (3.0, 2.0)
    assert given.key != plain.key


def test_plain_text_detected_by_content(tmp_path):
    path = tmp_path / "prompts"
    path.write_text("# title\n\na cat on a sofa\n../../etc/passwd\n")
    cat, odd = read_lines(path, DEFAULTS, "m")
    assert cat.settings["prompt"] == "a cat on a sofa" and cat.name == "0003-a-cat-on-a-sofa"
    assert odd.name == "0004-etc-passwd" and odd.error is None  # the prompt is text; its slug is safe


@pytest.mark.parametrize("line, fragment", [
    ('{"prompt": "x", ', "invalid JSON"),
    ({"size": "64x64"}, "missing prompt"),
    ({"prompt": "x", "colour": "red"}, "unknown keys ['colour']"),
    ({"prompt": "x", "size": "64x64", "height": 64}, "not both"),
    ({"prompt": "x", "size": "big"}, "WIDTHxHEIGHT"),
    ({"prompt": "x", "num_frames": "5"}, "num_frames must be an integer"),
    ({"prompt": "x", "name": "../escape"}, "is not allowed"),
    ({"prompt": "x", "negative_prompt": 3}, "negative_prompt must be a string"),
    ({"prompt": "x", "image": ["a.png"]}, "image must be a file path"),
    ({"prompt": "x", "guidance_scale_2": "3"}, "guidance_scale_2 must be a number"),
    ({"prompt": "x", "image": "missing.png"}, "missing.png does not exist"),
])
def test_a_bad_line_fails_alone_with_its_error(tmp_path, line, fragment):
    path = write_jsonl(tmp_path / "p.jsonl", [{"prompt": "good"}, line, {"prompt": "also good"}])
    good, bad, other = read_lines(path, DEFAULTS, "m")
    assert good.error is None and other.error is None
    assert bad.number == 2 and fragment in bad.error


def test_duplicate_names_and_model_rules(tmp_path):
    def reject_odd_frames(settings):
        if settings["num_frames"] % 4 != 1:
            raise UserInputError("num_frames must be 4*k+1")

    path = write_jsonl(tmp_path / "p.jsonl", [{"prompt": "a", "name": "x"}, {"prompt": "b", "name": "x"},
                                              {"prompt": "c", "num_frames": 6}])
    first, duplicate, frames = read_lines(path, DEFAULTS, "m", reject_odd_frames)
    assert first.error is None and "already used by line 1" in duplicate.error
    assert "4*k+1" in frames.error


def test_key_changes_with_every_setting_and_the_model(tmp_path):
    base = {"prompt": "a", "size": "64x64", "num_frames": 5, "steps": 2, "seed": 1}
    variants = [base, dict(base, prompt="b"), dict(base, size="64x128"), dict(base, num_frames=9),
                dict(base, steps=3), dict(base, seed=2), dict(base, guidance_scale=1.0), dict(base, fps=8)]
    lines = read_lines(write_jsonl(tmp_path / "p.jsonl", variants), DEFAULTS, "m")
    keys = {line.key for line in lines}
    assert len(keys) == len(variants)
    (other_model,) = read_lines(write_jsonl(tmp_path / "q.jsonl", [base]), DEFAULTS, "n")
    assert other_model.key not in keys
    named = read_lines(write_jsonl(tmp_path / "r.jsonl", [dict(base, name="renamed")]), DEFAULTS, "m")
    assert named[0].key == lines[0].key  # the name picks the file; it does not change the video


def test_missing_file_is_a_user_error(tmp_path):
    with pytest.raises(UserInputError, match="does not exist"):
        read_lines(tmp_path / "none.jsonl", DEFAULTS, "m")


def test_a_lines_adapters_key_it_by_their_files_and_scales_and_go_to_a_server_as_the_api_takes_them(tmp_path):
    from pipedit.lora.spec import LoraOffer, LoraSpec
    from pipedit.render.remote import create_body

    base = {"prompt": "a", "size": "64x64"}
    variants = [base, dict(base, loras=[]), dict(base, loras=[{"name": "style"}]),
                dict(base, loras=[{"name": "style", "scale": 0.7}]), dict(base, loras=[{"name": "style", "scale": 0.5}]),
                dict(base, loras=[{"name": "nope"}])]
    prompts = write_jsonl(tmp_path / "p.jsonl", variants)
    offer = LoraOffer((("style", LoraSpec(str(tmp_path / "style.safetensors"), 0.7)),), 2)
    plain, empty, default, explicit, half, unknown = read_lines(prompts, DEFAULTS, "m", loras=offer)
    assert empty.key == plain.key  # no adapters: the key lines had before the field existed
    assert default.key == explicit.key  # the name's default scale is the scale it runs at
    assert len({plain.key, default.key, half.key}) == 3
    assert unknown.error == "loras: 'nope' is not an adapter this server offers; offered: style"
    moved = LoraOffer((("style", LoraSpec(str(tmp_path / "other.safetensors"), 0.7)),), 2)
    assert read_lines(prompts, DEFAULTS, "m", loras=moved)[2].key != default.key  # another file under the name
    # An endpoint render: the server resolves the names; the line goes as the API's list.
    remote = read_lines(prompts, DEFAULTS, "m")
    assert create_body(remote[2])["loras"] == [{"name": "style"}]
    assert create_body(remote[4])["loras"] == [{"name": "style", "scale": 0.5}]
    assert "loras" not in create_body(remote[1]) and remote[5].error is None
