"""HunyuanVideo 1.5's registry entry (pipedit.families discovers it)."""

from pipedit.families import Demo, DryRun, Family, Hub, Planner, component_files

_HERE = "pipedit.integrations.hunyuan_video_15"

FAMILY = Family(
    name="hunyuan-video-1.5",
    adapter=f"{_HERE}.adapter:HunyuanVideo15Adapter",
    pipelines=("HunyuanVideo15Pipeline", "HunyuanVideo15ImageToVideoPipeline"),
    planner=Planner(full_size=f"{_HERE}.planner:SIZES",
                    from_checkpoint=f"{_HERE}.planner:from_checkpoint",
                    vae_flops=f"{_HERE}.planner:decode_flops",
                    vae_peak=f"{_HERE}.planner:decode_peak_bytes",
                    decode_split="pipedit.planner.split_decode:UNSPLIT"),
    demo=Demo(ensure=f"{_HERE}.demo_checkpoint:ensure_demo_checkpoint",
              write=f"{_HERE}.demo_checkpoint:write_preset",
              presets=f"{_HERE}.presets:described",
              about="a tiny HunyuanVideo 1.5 in the diffusers layout (the --preset names which)"),
    dry_run=DryRun(released=f"{_HERE}.released:write_release",
                   fakes=((f"{_HERE}.adapter:load_component", f"{_HERE}.dryrun:fake_hunyuan_video_15_component"),
                          (f"{_HERE}.adapter:encode_mllm", f"{_HERE}.dryrun:fake_qwen_encode"),
                          (f"{_HERE}.adapter:encode_glyphs", f"{_HERE}.dryrun:fake_byt5_encode"),
                          (f"{_HERE}.image_condition:image_pixels", f"{_HERE}.dryrun:fake_image_pixels")),
                   tiling=f"{_HERE}.adapter"),
    # No TeaCache coefficients are published for HunyuanVideo 1.5 (TeaCache's sets cover HunyuanVideo,
    # Wan2.1 and others): refused, fbcache runs.
    teacache=None,
    # diffusers 0.42.1 has no LoRA loader mixin for HunyuanVideo 1.5 (its transformer takes PEFT
    # adapters, but no pipeline reads LoRA files for it): pipedit's own conversion reads every form.
    lora=None,
    lora_names=f"{_HERE}.lora_names:RENAMES",
    # Size: parameters x stored bytes (8.3B transformer and the 7B Qwen2.5-VL encoder in bfloat16,
    # ByT5 and the VAE in float32, the i2v repos' SigLIP too), rounded up.
    hub=Hub(files=component_files("transformer", "text_encoder", "text_encoder_2", "vae", "image_encoder",
                                  whole=("scheduler", "guider", "tokenizer", "tokenizer_2", "feature_extractor")),
            sizes=(("hunyuanvideo-community/HunyuanVideo-1.5-Diffusers-480p_t2v", 35),
                   ("hunyuanvideo-community/HunyuanVideo-1.5-Diffusers-480p_i2v", 36))),
    order=3,
)
