"""A test family that makes sound: the demo HunyuanVideo model whose adapter also decodes a sound
track (named by PIPEDIT_FAMILIES as tests.sound_family.family, importable from the repository root,
which is where the rank actors start too)."""

from pipedit.families import Demo, DryRun, Family, Planner

NAME = "sound-video"
PIPELINE = "SoundVideoPipeline"

FAMILY = Family(
    name=NAME,
    adapter="tests.sound_family.model:SoundVideoAdapter",
    pipelines=(PIPELINE,),
    planner=Planner(full_size="tests.sound_family.model:SIZES", from_checkpoint="tests.sound_family.model:from_checkpoint",
                    vae_flops="pipedit.integrations.hunyuan_video.planner:vae_flops",
                    vae_peak="pipedit.integrations.hunyuan_video.planner:decode_peak_bytes",
                    decode_split="pipedit.planner.split_decode:UNSPLIT"),
    dry_run=DryRun(released="pipedit.integrations.hunyuan_video.released:write_release"),
    demo=Demo(ensure="tests.sound_family.model:ensure_demo_checkpoint",
              write="tests.sound_family.model:write_demo_checkpoint", about="a tiny video model with sound"),
    order=1001,
)
