"""Wan2.1 / Wan2.2's registry entry (pipedit.families discovers it)."""

from pipedit.families import Demo, DryRun, Family, Planner

_HERE = "pipedit.integrations.wan"

FAMILY = Family(
    name="wan",
    adapter=f"{_HERE}.adapter:WanAdapter",
    pipelines=("WanPipeline", "WanImageToVideoPipeline"),
    options=frozenset({"idle_expert"}),
    lora="diffusers.loaders.lora_pipeline:WanLoraLoaderMixin",
    planner=Planner(full_size=f"{_HERE}.planner:SIZES",
                    from_checkpoint=f"{_HERE}.planner:from_checkpoint",
                    vae_flops=f"{_HERE}.planner:vae_flops",
                    vae_peak=f"{_HERE}.planner:decode_peak_bytes",
                    decode_split="pipedit.planner.split_decode:UNSPLIT",
                    published=f"{_HERE}.published:PUBLISHED",
                    names_itself=True),
    demo=Demo(ensure=f"{_HERE}.demo_checkpoint:ensure_demo_checkpoint",
              write=f"{_HERE}.demo_checkpoint:write_preset",
              presets=f"{_HERE}.presets:described",
              about="a tiny Wan in the diffusers layout (the --preset names which)"),
    dry_run=DryRun(released=f"{_HERE}.released:write_release",
                   fakes=((f"{_HERE}.adapter:load_component", "pipedit.dryrun.models:fake_component"),
                          (f"{_HERE}.adapter:encode_text", f"{_HERE}.dryrun:fake_umt5_encode"),
                          (f"{_HERE}.image_condition:first_frame_video", f"{_HERE}.dryrun:fake_first_frame_video"))),
    order=2,
    takes=(("image", 0, "wan with an image-to-video checkpoint (WanImageToVideoPipeline: Wan2.1 I2V, Wan2.2 I2V A14B)"),
           ("flow_shift", 1, "wan with a flow-sigma UniPC, DPM-Solver or flow-match Euler scheduler"),
           ("negative_prompt", 0, "wan")),
)
