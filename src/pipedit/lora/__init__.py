"""LoRA adapters on the DiT: what a run asks for (spec.py) and how the denoise ranks read and
inject them (inject.py). Conversion of the trainers' file forms is diffusers' own (its LoRA loader
mixins), the injected layers are peft's."""
