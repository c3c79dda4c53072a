"""HunyuanVideo's registry entry (pipedit.families discovers it)."""

from pipedit.families import Demo, DryRun, Family, Hub, Planner, component_files

_HERE = "pipedit.integrations.hunyuan_video"

FAMILY = Family(
    name="hunyuan-video",
    adapter=f"{_HERE}.adapter:HunyuanVideoAdapter",
    pipelines=("HunyuanVideoPipeline",),
    planner=Planner(full_size=f"{_HERE}.planner:SIZES",
                    from_checkpoint=f"{_HERE}.planner:from_checkpoint",
                    vae_flops=f"{_HERE}.planner:vae_flops",
                    vae_peak=f"{_HERE}.planner:decode_peak_bytes",
                    decode_split=f"{_HERE}.planner:PASSES_AND_TILES",
                    published=f"{_HERE}.published:PUBLISHED",
                    paper=f"{_HERE}.published:PAPER"),
    demo=Demo(ensure=f"{_HERE}.demo_checkpoint:ensure_demo_checkpoint",
              write=f"{_HERE}.presets:write_preset",
              presets=f"{_HERE}.presets:described"),
    dry_run=DryRun(released=f"{_HERE}.released:write_release",
                   fakes=((f"{_HERE}.adapter:load_component", "pipedit.dryrun.models:fake_component"),),
                   tiling=f"{_HERE}.adapter"),
    # ali-vilab/TeaCache, TeaCache4HunyuanVideo/teacache_sample_video.py (teacache_forward),
    # fitted by the TeaCache authors on the modulated input of double_blocks[0] (img_norm1 then
    # img_mod shift/scale).
    teacache=(7.33226126e02, -4.01131952e02, 6.75869174e01, -3.14987800e00, 9.61237896e-02),
    lora="diffusers.loaders.lora_pipeline:HunyuanVideoLoraLoaderMixin",
    lora_names=f"{_HERE}.lora_names:RENAMES",
    # Size: parameters x stored bytes (13B transformer and the 8B LLaVA-Llama-3 encoder in bfloat16,
    # CLIP-L and the VAE in float32), rounded up.
    hub=Hub(files=component_files("transformer", "text_encoder", "text_encoder_2", "vae",
                                  whole=("scheduler", "tokenizer", "tokenizer_2")),
            sizes=(("hunyuanvideo-community/HunyuanVideo", 43),)),
    default=True,
    order=0,
    takes=(("flow_shift", 0, "hunyuan-video"),),
    benches=frozenset({"cache", "vae-ranks"}),
    check_preset=f"{_HERE}.presets:ensure_full_width",
    vae_predictor=f"{_HERE}.vae_memory:predict_decode_peak_bytes",
)
