"""Benchmarks: one module per benchmark (sp, pipeline, handoff, vae, latency), the `pipedit bench`
sub-commands (cli) and the latency report writers (report)."""
