import os
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def full_width_checkpoint(tmp_path_factory):
    """The full-width synthetic HunyuanVideo (3.6 GB): PIPEDIT_FULL_WIDTH_CHECKPOINT names a copy
    written earlier (`pipedit demo-checkpoint --preset hunyuan-video-full-width DIR`), else it is
    written once per test session."""
    given = os.environ.get("PIPEDIT_FULL_WIDTH_CHECKPOINT")
    if given:
        return Path(given)
    from pipedit.integrations.hunyuan_video.presets import write_preset

    return write_preset(tmp_path_factory.mktemp("models") / "full-width", "hunyuan-video-full-width")
