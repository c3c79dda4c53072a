"""OpenSoraPlan v1.3's registry entry (pipedit.families discovers it)."""

from pipedit.families import Demo, DryRun, Family, Hub, Planner

_HERE = "pipedit.integrations.opensora_plan"

FAMILY = Family(
    name="opensora-plan",
    adapter=f"{_HERE}.adapter:OpenSoraPlanAdapter",
    # diffusers has no Open-Sora-Plan pipeline: a model_index.json naming this one holds the
    # release's transformer and vae configs (the planner reads them from transformer/ and vae/).
    pipelines=("OpenSoraPlanPipeline",),
    layout=f"{_HERE}.checkpoint:is_official_layout",
    layout_about="the official Open-Sora-Plan v1.3 layout (any93x640x640/ and vae/)",
    options=frozenset({"text_encoder_path"}),
    # The release repo holds several transformers (any93x640x640 and others): this one is served.
    # Size: parameters x stored bytes (the 2.7B transformer in float32, the WFVAE's merged.ckpt),
    # rounded up; the mT5-XXL encoder (model.text_encoder_path, google/mt5-xxl) apart.
    hub=Hub(files=("any93x640x640/*.json", "any93x640x640/*.safetensors", "vae/config.json", "vae/merged.ckpt",
                   "text_encoder/*"),
            text_encoder_files=("*.json", "*.safetensors", "*.model", "*.txt"),
            sizes=(("LanguageBind/Open-Sora-Plan-v1.3.0", 12),)),
    heads=f"{_HERE}.adapter:OpenSoraPlanAdapter.config_heads",
    planner=Planner(full_size=f"{_HERE}.planner:SIZES",
                    from_checkpoint=f"{_HERE}.planner:from_checkpoint",
                    vae_flops=f"{_HERE}.planner:vae_flops",
                    vae_peak=f"{_HERE}.planner:decode_peak_bytes",
                    decode_split=f"{_HERE}.planner:ROW_BANDS",
                    paper=f"{_HERE}.published:PAPER"),
    demo=Demo(ensure=f"{_HERE}.demo_checkpoint:ensure_demo_checkpoint",
              write=f"{_HERE}.demo_checkpoint:write_demo_checkpoint",
              about="a tiny model in the official v1.3 layout (any93x640x640/, vae/, text_encoder/)"),
    dry_run=DryRun(released=f"{_HERE}.released:write_release",
                   fakes=((f"{_HERE}.adapter:load_text_encoder", f"{_HERE}.dryrun:fake_mt5_encoder"),
                          (f"{_HERE}.transformer:load_transformer", f"{_HERE}.dryrun:fake_transformer"),
                          (f"{_HERE}.wfvae:load_wfvae", f"{_HERE}.dryrun:fake_wfvae"))),
    # TeaCache's Open-Sora-Plan set (eval/teacache/experiments/opensora_plan.py) belongs to v1.1
    # (Latte-style spatial + temporal blocks), another architecture than v1.3's: none published.
    teacache=None,
    order=1,
    takes=(("negative_prompt", 1, "opensora-plan"),),
    benches=frozenset({"cache", "vae-ranks"}),
)
