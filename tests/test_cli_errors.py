"""Bad input: one clear line on stderr, exit code 2, never a traceback."""

import json
import shutil

import pytest

from pipedit.cli import main


def _generate(*extra, output="out.mp4"):
    return ["generate", "--prompt", "a cat", "--output", output, *extra]


def _run(capsys, argv):
    code = main([str(a) for a in argv])
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return code, err


@pytest.mark.parametrize(
    "flags,message",
    [
        (["--height", "100"], "multiples of 16"),
        (["--width", "8"], "multiples of 16"),
        (["--num-frames", "10"], "4*k+1"),
        (["--num-frames", "0"], "4*k+1"),
        (["--steps", "0"], "steps must be at least 1"),
        (["--guidance-scale", "-1"], "guidance_scale must be >= 0"),
    ],
)
def test_request_the_model_cannot_take(demo_checkpoint, capsys, tmp_path, flags, message):
    argv = _generate("--model-path", demo_checkpoint, *flags, output=tmp_path / "v.mp4")
    code, err = _run(capsys, argv)
    assert code == 2
    assert message in err
    assert not (tmp_path / "v.mp4").exists()


def test_empty_prompt(capsys, tmp_path):
    code, err = _run(capsys, ["generate", "--prompt", "  ", "--output", tmp_path / "v.mp4"])
    assert code == 2 and "prompt must be a non-empty string" in err


def test_output_must_be_mp4(capsys, tmp_path):
    code, err = _run(capsys, _generate(output=tmp_path / "v.gif"))
    assert code == 2 and ".mp4" in err


def test_missing_model_path(capsys, tmp_path):
    code, err = _run(capsys, _generate("--model-path", tmp_path / "nowhere"))
    assert code == 2 and "does not exist" in err


def test_folder_without_model_index(capsys, tmp_path):
    code, err = _run(capsys, _generate("--model-path", tmp_path))
    assert code == 2 and "model_index.json is missing" in err


def test_malformed_model_index(capsys, tmp_path):
    (tmp_path / "model_index.json").write_text("{not json")
    code, err = _run(capsys, _generate("--model-path", tmp_path))
    assert code == 2 and "not valid JSON" in err


def test_unsupported_pipeline(capsys, tmp_path):
    (tmp_path / "model_index.json").write_text(json.dumps({"_class_name": "StableDiffusionPipeline"}))
    code, err = _run(capsys, _generate("--model-path", tmp_path))
    assert code == 2 and "supported pipelines: HunyuanVideo15ImageToVideoPipeline, HunyuanVideo15Pipeline, " \
                         "HunyuanVideoPipeline" in err


@pytest.mark.parametrize("missing", ["transformer/config.json", "vae", "tokenizer/tokenizer.json"])
def test_incomplete_checkpoint_names_the_missing_file(demo_checkpoint, capsys, tmp_path, missing):
    broken = tmp_path / "broken"
    shutil.copytree(demo_checkpoint, broken)
    target = broken / missing
    if target.is_dir():
        shutil.rmtree(target)
    else:
        target.unlink()
        if missing.startswith("tokenizer"):
            (broken / "tokenizer" / "tokenizer_config.json").unlink()
    code, err = _run(capsys, _generate("--model-path", broken, output=tmp_path / "v.mp4"))
    assert code == 2
    assert str(broken / missing.split("/")[0]) in err


def test_bad_flag_value_is_an_argparse_error(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["generate", "--prompt", "x", "--output", "o.mp4", "--steps", "many"])
    assert exit_info.value.code == 2
    assert "expected an integer" in capsys.readouterr().err


def test_bad_vae_tiling_flag(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["generate", "--prompt", "x", "--output", "o.mp4", "--vae-tiling", "bogus"])
    assert exit_info.value.code == 2
    assert "invalid choice: 'bogus'" in capsys.readouterr().err


def test_bad_parallel_setting(capsys, tmp_path):
    code, err = _run(capsys, _generate("--ulysses", "0", output=tmp_path / "v.mp4"))
    assert code == 2 and "ulysses degree must be an integer >= 1" in err


def test_more_ulysses_ranks_than_heads_is_refused_up_front(demo_checkpoint, capsys, tmp_path):
    code, err = _run(capsys, _generate("--model-path", demo_checkpoint, "--ulysses", "5", output=tmp_path / "v.mp4"))
    assert code == 2
    assert "exceeds the model's 4 attention heads" in err
    assert "--ulysses 1 --ring 5" in err
