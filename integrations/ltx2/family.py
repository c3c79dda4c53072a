"""LTX-2's registry entry (pipedit.families discovers it)."""

from pipedit.families import Demo, DryRun, Family, Hub, Planner, component_files

_HERE = "pipedit.integrations.ltx2"

FAMILY = Family(
    name="ltx-2",
    adapter=f"{_HERE}.adapter:LTX2Adapter",
    pipelines=("LTX2Pipeline", "LTX2ImageToVideoPipeline"),
    refuses=(("LTX2LatentUpsamplePipeline", "the latent upsampler (a second model and a second denoise over the "
                                            "upsampled latents)"),
             ("LTX2InContextPipeline", "IC-LoRA (reference-video conditioning)"),
             ("LTX2ConditionPipeline", "keyframe and video conditioning"),
             ("LTX2DFRPipeline", "DFR (the dynamic-frame-rate stages)"),
             ("LTX2DFRTemporalRefinePipeline", "DFR's temporal refinement"),
             ("LTX2HDRPipeline", "the HDR LoRA stage"),
             ("LTX2VideoDiffusionDecodePipeline", "the diffusion decoder")),
    planner=Planner(full_size=f"{_HERE}.planner:SIZES",
                    from_checkpoint=f"{_HERE}.planner:from_checkpoint",
                    vae_flops=f"{_HERE}.planner:vae_flops",
                    vae_peak=f"{_HERE}.planner:decode_peak_bytes",
                    decode_split="pipedit.planner.split_decode:UNSPLIT",
                    names_itself=True),
    demo=Demo(ensure=f"{_HERE}.demo_checkpoint:ensure_demo_checkpoint",
              write=f"{_HERE}.demo_checkpoint:write_preset",
              presets=f"{_HERE}.presets:described",
              about="a tiny LTX-2 (video with sound) in the diffusers layout (the --preset names which)"),
    dry_run=DryRun(released=f"{_HERE}.released:write_release",
                   fakes=((f"{_HERE}.adapter:load_component", "pipedit.dryrun.models:fake_component"),
                          (f"{_HERE}.adapter:encode_text", f"{_HERE}.dryrun:fake_gemma_encode"))),
    lora="diffusers.loaders.lora_pipeline:LTX2LoraLoaderMixin",
    lora_names=f"{_HERE}.lora_names:RENAMES",
    # Gemma's own shards only (model-*.safetensors): Lightricks/LTX-2's text_encoder/ also holds a
    # stale diffusion_pytorch_model-*-of-00012 set (Gemma and an old copy of the connectors, 51.6 GB).
    # Sizes: the released files (DiT, connectors and VAEs in bfloat16, Gemma 3 12B in float32:
    # 37.8 + 2.9 + 2.4 + 0.2 + 48.7 GB and the tokenizer), rounded up; the distilled repo's files
    # are the same sizes.
    hub=Hub(files=component_files("transformer", "connectors", "vae", "audio_vae", "vocoder",
                                  whole=("scheduler", "tokenizer"))
            + ("text_encoder/*.json", "text_encoder/model*.safetensors"),
            sizes=(("Lightricks/LTX-2", 93), ("rootonchair/LTX-2-19b-distilled", 93))),
    order=5,
    takes=(("image", 3, "ltx-2 (LTX2ImageToVideoPipeline checkpoints, or any LTX-2 checkpoint with an image)"),
           ("flow_shift", 3, "ltx-2"),
           ("negative_prompt", 3, "ltx-2")),
)
