"""Console hygiene shared by the CLI and the workers."""

from __future__ import annotations


def quiet_libraries() -> None:
    """pipedit's own progress is the one that matters: silence per-file loading bars and notices
    from diffusers and transformers (they print once per component, on every rank)."""
    from diffusers.utils import logging as diffusers_logging
    from transformers.utils import logging as transformers_logging

    for logging in (diffusers_logging, transformers_logging):
        logging.set_verbosity_error()
        logging.disable_progress_bar()
