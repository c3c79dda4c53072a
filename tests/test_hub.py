"""Hub ids (`org/name[@revision]`) where a model or LoRA path is taken, read offline from a cache
laid out as huggingface_hub lays it out (tests/hub_cache.py), HF_HOME in a tmp folder and
HF_HUB_OFFLINE=1: the network is never reached."""

import json

import pytest
import torch

from hub_cache import add_snapshot
from pipedit.cli import main

OLD, NEW = "1" * 40, "2" * 40
PROMPT, SHAPE = "a lighthouse at dusk", ["--height", "80", "--width", "112", "--num-frames", "17"]


@pytest.fixture
def hub_home(tmp_path, monkeypatch):
    """HF_HOME in tmp_path, offline; the cache folder."""
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return tmp_path / "hf" / "hub"


@pytest.fixture
def cached_demo(hub_home, demo_checkpoint, tmp_path):
    """The demo HunyuanVideo as org/tiny-hv: NEW on main, and OLD, an earlier commit whose
    transformer config differs (one layer fewer)."""
    add_snapshot(hub_home, "org/tiny-hv", demo_checkpoint, NEW)
    older = tmp_path / "older"
    for file in demo_checkpoint.rglob("*"):
        if file.is_file():
            target = older / file.relative_to(demo_checkpoint)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(file.read_bytes())
    config = json.loads((older / "transformer" / "config.json").read_text())
    config["num_single_layers"] = config["num_single_layers"] + 1
    (older / "transformer" / "config.json").write_text(json.dumps(config))
    add_snapshot(hub_home, "org/tiny-hv", older, OLD, ref=None)
    return demo_checkpoint


def test_generate_takes_a_hub_id_offline_from_the_cache(cached_demo, tmp_path):
    """The id's run equals the folder's: the same files, read through the cache."""
    runs = {}
    for name, path in (("id", "org/tiny-hv"), ("folder", str(cached_demo))):
        assert main(["generate", "--prompt", PROMPT, "--model-path", path, *SHAPE, "--steps", "1", "--seed", "3",
                     "--output", str(tmp_path / f"{name}.mp4"), "--save-latents", str(tmp_path / f"{name}.pt")]) == 0
        runs[name] = torch.load(tmp_path / f"{name}.pt")
    assert torch.equal(runs["id"], runs["folder"])


def test_an_id_not_in_the_cache_fails_naming_the_id_and_the_cache(hub_home, tmp_path, capsys):
    code = main(["generate", "--prompt", PROMPT, "--model-path", "org/not-cached", "--output",
                 str(tmp_path / "out.mp4")])
    err = capsys.readouterr().err
    assert code != 0 and "org/not-cached" in err and str(hub_home) in err and "HF_HUB_OFFLINE" in err


def test_a_revision_pins_the_files(cached_demo, hub_home):
    from pipedit.hub import model_folder

    main_folder, old_folder = model_folder("org/tiny-hv"), model_folder(f"org/tiny-hv@{OLD}")
    assert main_folder.name == NEW and old_folder.name == OLD
    layers = [json.loads((f / "transformer" / "config.json").read_text())["num_single_layers"]
              for f in (main_folder, old_folder)]
    assert layers[1] == layers[0] + 1
    assert (old_folder / "transformer" / "diffusion_pytorch_model.safetensors").is_file()


def test_a_local_folder_wins_over_an_id(cached_demo, tmp_path, monkeypatch):
    from pipedit.hub import hub_id

    monkeypatch.chdir(tmp_path)
    assert hub_id("org/tiny-hv") is not None
    (tmp_path / "org" / "tiny-hv").mkdir(parents=True)
    assert hub_id("org/tiny-hv") is None


def test_dry_run_takes_an_id_with_its_configs_only(cached_demo, hub_home, tmp_path, capsys):
    """The driver's side of every entry point (serve, render, bench plan from the same
    resolve_model_path): the configs are enough, no weights are read."""
    from pipedit.hub import model_configs

    configs = model_configs("org/tiny-hv")
    assert (configs / "model_index.json").is_file()
    config = tmp_path / "config.yaml"
    config.write_text("model:\n  dtype: bfloat16\ngeneration:\n  height: 64\n  width: 64\n  num_frames: 9\n")
    code = main(["dry-run", "--config", str(config), "--model-path", "org/tiny-hv", "--steps", "1", "--json"])
    assert code == 0 and json.loads(capsys.readouterr().out)["ok"]


def test_a_lora_id_names_its_file_in_the_cache(hub_home, tmp_path):
    from pipedit.errors import UserInputError
    from pipedit.hub import lora_file

    folder = tmp_path / "lora"
    folder.mkdir()
    (folder / "style.safetensors").write_bytes(b"not read here")
    add_snapshot(hub_home, "org/style-lora", folder, NEW)
    assert lora_file("org/style-lora") == hub_home / "models--org--style-lora" / "snapshots" / NEW / "style.safetensors"
    assert lora_file(f"org/style-lora@{NEW}/style.safetensors").name == "style.safetensors"
    (folder / "other.safetensors").write_bytes(b"x")
    add_snapshot(hub_home, "org/two-loras", folder, NEW)
    with pytest.raises(UserInputError, match="holds 2 .safetensors files"):
        lora_file("org/two-loras")


def test_the_placement_check_says_whether_the_nodes_share_one_cache(monkeypatch, tmp_path):
    from pipedit.config import ModelConfig
    from pipedit.hub import cluster_fetch_plan, mount_type

    monkeypatch.setenv("HF_HOME", "/shared/hf")
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    mounts = "/dev/sda1 / ext4 rw 0 0\nfiler:/vol /shared nfs4 rw 0 0\n"
    assert mount_type("/shared/hf/hub", mounts) == "nfs4" and mount_type("/sharedx", mounts) == "ext4"
    model = ModelConfig(path="org/tiny-hv@main", run_loras=("org/style/a.safetensors:0.8",))
    shared = cluster_fetch_plan(model, 2, mounts)
    assert "org/tiny-hv@main, org/style/a.safetensors" in shared and "one shared cache /shared/hf/hub (nfs4)" in shared
    monkeypatch.setenv("HF_HOME", "/local/hf")
    assert "each of the 2 nodes fetches them into its own cache /local/hf/hub (ext4" in cluster_fetch_plan(
        model, 2, mounts)
    assert "once into this node's cache" in cluster_fetch_plan(model, 1, mounts)
    assert cluster_fetch_plan(ModelConfig(path=str(tmp_path)), 2, mounts) is None  # a local folder: nothing fetched
