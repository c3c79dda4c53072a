"""Wan2.1 / Wan2.2's registry entry (pipedit.families discovers it)."""

from pipedit.families import Demo, DryRun, Family, Hub, Planner, component_files

_HERE = "pipedit.integrations.wan"

FAMILY = Family(
    name="wan",
    adapter=f"{_HERE}.adapter:WanAdapter",
    pipelines=("WanPipeline", "WanImageToVideoPipeline"),
    options=frozenset({"idle_expert"}),
    lora="diffusers.loaders.lora_pipeline:WanLoraLoaderMixin",
    lora_names=f"{_HERE}.lora_names:RENAMES",
    # Sizes: parameters x the stored bytes of the diffusers repos (transformer and VAE in float32, the
    # umT5-XXL encoder in bfloat16, Wan2.1 I2V's CLIP image encoder in float32), rounded up.
    hub=Hub(files=component_files("transformer", "transformer_2", "text_encoder", "vae", "image_encoder",
                                  whole=("scheduler", "tokenizer", "image_processor")),
            sizes=(("Wan-AI/Wan2.1-T2V-1.3B-Diffusers", 18), ("Wan-AI/Wan2.1-T2V-14B-Diffusers", 69),
                   ("Wan-AI/Wan2.1-I2V-14B-480P-Diffusers", 72), ("Wan-AI/Wan2.2-TI2V-5B-Diffusers", 33),
                   ("Wan-AI/Wan2.2-T2V-A14B-Diffusers", 126))),
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
