"""The model-family registry (pipedit.families): one entry makes a family known everywhere that
lists or selects families, unknown pipelines are refused by name, and every lazy target imports."""

import json
import sys

import pytest

from pipedit import families
from pipedit.adapter import adapter_class_for, attention_heads, check_video_shape, model_name_for, shape_validator
from pipedit.capabilities import Capabilities
from pipedit.config import GenerationDefaults
from pipedit.cli import build_parser
from pipedit.errors import ModelPathError
from pipedit.families import Demo, DryRun, Family, Planner

TOY = "toy-video"
HERE = sys.modules[__name__].__name__


class ToyAdapter:
    """What the registry's callers read of an adapter class without loading a model, and what the
    server and the renderer check requests with (its configs-only form: validate, capabilities)."""

    family = TOY
    preferred_text_encoder = "dit"
    capabilities = Capabilities()  # text to video: no negative prompt, no image, one expert

    @classmethod
    def from_pretrained(cls, path, *, parts=frozenset(), **options):
        return cls()

    def validate(self, shape, steps) -> None:
        check_video_shape(shape, steps, size_multiple=16, frame_stride=4, model=TOY)


def _toy_demo():
    raise AssertionError("the toy family has no demo checkpoint")


def _toy_entry() -> Family:
    hunyuan = families.family("hunyuan-video")
    return Family(name=TOY, adapter=f"{HERE}:ToyAdapter", pipelines=("ToyVideoPipeline",),
                  planner=hunyuan.planner, demo=Demo(ensure=f"{HERE}:_toy_demo", write=f"{HERE}:_toy_demo"),
                  dry_run=DryRun(released=f"{HERE}:_toy_demo"))


@pytest.fixture
def toy():
    entry = families.register(_toy_entry())
    try:
        yield entry
    finally:
        families.unregister(TOY)


def _checkpoint(root, pipeline: str, heads: int = 6):
    (root / "transformer").mkdir(parents=True)
    (root / "model_index.json").write_text(json.dumps({"_class_name": pipeline}))
    (root / "transformer" / "config.json").write_text(json.dumps({"num_attention_heads": heads}))
    return root


def _help(capsys, *argv: str) -> str:
    with pytest.raises(SystemExit) as done:
        build_parser().parse_args([*argv, "--help"])
    assert done.value.code == 0
    return capsys.readouterr().out


def test_a_registered_family_is_listed_by_the_cli(toy, capsys):
    assert TOY in families.family_names()
    assert TOY in _help(capsys, "generate")
    assert TOY in _help(capsys, "demo-checkpoint", "dir")
    assert TOY in _help(capsys, "bench", "sp")
    args = build_parser().parse_args(["generate", "--prompt", "p", "--output", "o.mp4", "--model", TOY])
    assert args.model == TOY  # an accepted choice


def test_a_checkpoint_naming_its_pipeline_selects_the_family(toy, tmp_path):
    from pipedit.planner.models import family_of

    root = _checkpoint(tmp_path / "toy", "ToyVideoPipeline", heads=6)
    assert families.family_for_pipeline("ToyVideoPipeline") is toy
    assert families.family_of_checkpoint(root) is toy
    assert model_name_for(root) == TOY and family_of(root) == TOY
    assert adapter_class_for(root) is ToyAdapter
    assert attention_heads(root) == 6


def test_an_unknown_pipeline_is_refused_naming_the_known_ones(toy, tmp_path):
    from pipedit.planner.models import family_of

    root = _checkpoint(tmp_path / "other", "StableDiffusionPipeline")
    for find in (model_name_for, family_of, families.family_of_checkpoint):
        with pytest.raises(ModelPathError, match="holds a StableDiffusionPipeline; supported pipelines: ") as error:
            find(root)
        for known in ("HunyuanVideoPipeline", "WanPipeline", "ToyVideoPipeline"):
            assert known in str(error.value)
    with pytest.raises(ModelPathError, match="unknown pipeline 'SomePipeline'; supported pipelines: .*ToyVideo"):
        families.family_for_pipeline("SomePipeline")


def test_an_unknown_name_is_refused_naming_the_known_ones(toy):
    with pytest.raises(ModelPathError, match=f"unknown model 'sora'; supported models: hunyuan-video, .*{TOY}"):
        families.family("sora")


def test_unregistered_the_family_is_gone(tmp_path):
    families.register(_toy_entry())
    families.unregister(TOY)
    assert TOY not in families.family_names()
    with pytest.raises(ModelPathError, match="supported pipelines"):
        families.family_for_pipeline("ToyVideoPipeline")


def test_two_families_cannot_serve_one_pipeline():
    clash = Family(name="clash", adapter=f"{HERE}:ToyAdapter", pipelines=("WanPipeline",),
                   planner=families.family("wan").planner, demo=Demo(ensure="x:y", write="x:y"),
                   dry_run=DryRun(released="x:y"))
    with pytest.raises(ValueError, match="clash and wan both serve WanPipeline"):
        families.register(clash)
    assert "clash" not in families.family_names()


def _targets(entry: Family) -> list[str]:
    found = [entry.adapter, entry.planner.full_size, entry.planner.from_checkpoint, entry.planner.vae_flops,
             entry.planner.vae_peak, entry.planner.decode_split, entry.demo.ensure, entry.demo.write,
             entry.dry_run.released, *(target for pair in entry.dry_run.fakes for target in pair)]
    found += [target for target in (entry.demo.presets, entry.layout, entry.heads, entry.planner.published,
                                    entry.planner.paper, entry.check_preset, entry.vae_predictor) if target]
    if entry.dry_run.tiling:
        found += [f"{entry.dry_run.tiling}:should_tile", f"{entry.dry_run.tiling}:free_device_bytes"]
    return found


@pytest.mark.parametrize("name", families.family_names())
def test_every_lazy_target_of_a_family_imports(name):
    entry = families.family(name)
    for target in _targets(entry):
        assert families.load(target) is not None, target
    assert entry.adapter_class().family == name  # one spelling: the adapter's family is the registry's name
    assert set(entry.options) <= set(families.LOADING_OPTIONS)
    sizes = families.load(entry.planner.full_size)
    assert sizes and all(families.family_for_release(release) is entry for release in sizes)
    assert all(sizes[release]().family == name for release in sizes)
    if entry.demo.presets:
        default, described = families.load(entry.demo.presets)()
        assert default in described


def test_importing_the_registry_imports_no_model_code():
    import subprocess

    code = ("import sys, pipedit.families; "
            "print(sorted(m for m in sys.modules if m.startswith(('pipedit.', 'torch', 'diffusers'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "['pipedit.errors', 'pipedit.families']"


def test_the_api_validates_for_a_registered_family_and_refuses_what_it_lacks(toy, tmp_path):
    from pipedit.serve.contract.errors import ApiError
    from pipedit.serve.contract.params import ServiceLimits, resolve
    from pipedit.serve.contract.schemas import VideoCreateParams

    validate = shape_validator(_checkpoint(tmp_path / "toy", "ToyVideoPipeline"))

    def create(**fields):
        return resolve(VideoCreateParams(prompt="a toy", **fields), "toy", GenerationDefaults(), ServiceLimits(),
                       validate)

    assert create(size="64x32", num_frames=9).num_frames == 9
    with pytest.raises(ApiError) as shape:
        create(size="64x40")
    assert shape.value.code == "unsupported_shape" and "multiples of 16 for toy-video" in shape.value.message
    for field, value in (("negative_prompt", "blurry"), ("guidance_scale_2", 3.0)):
        with pytest.raises(ApiError) as refused:
            create(**{field: value})
        assert (refused.value.param, refused.value.code) == (field, "unsupported_parameter")
        assert TOY in refused.value.message and "leave it out" in refused.value.message
