"""pipedit: fast serving of video diffusion transformers on multi-GPU nodes."""
