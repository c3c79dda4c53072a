"""The fake family's registry entry: only pipedit.families' dataclasses are imported here."""

from pipedit.families import Demo, DryRun, Family, Planner

NAME = "fake-video"
PIPELINE = "FakeVideoPipeline"

FAMILY = Family(
    name=NAME,
    adapter="fake_family.model:FakeVideoAdapter",
    pipelines=(PIPELINE,),
    planner=Planner(full_size="fake_family.model:SIZES",
                    from_checkpoint="fake_family.model:from_checkpoint",
                    vae_flops="pipedit.integrations.hunyuan_video.planner:vae_flops",
                    vae_peak="pipedit.integrations.hunyuan_video.planner:decode_peak_bytes",
                    decode_split="pipedit.planner.split_decode:UNSPLIT"),
    demo=Demo(ensure="fake_family.model:ensure_demo_checkpoint", write="fake_family.model:write_demo_checkpoint",
              about="a tiny fake video model"),
    dry_run=DryRun(released="fake_family.model:write_release",
                   fakes=(("pipedit.integrations.hunyuan_video.adapter:load_component",
                           "pipedit.dryrun.models:fake_component"),),
                   tiling="pipedit.integrations.hunyuan_video.adapter"),
    order=1000,
)
