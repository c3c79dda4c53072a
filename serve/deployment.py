"""The import path Ray Serve's CLI is given, kept where it is documented (docs/serving.md):
`serve run pipedit.serve.deployment:app_builder config=configs/demo-cpu.yaml`. The application
itself: pipedit.serve.ray_app.deployment."""

from .ray_app.deployment import app_builder

__all__ = ["app_builder"]
