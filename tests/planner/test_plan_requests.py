"""`pipedit plan` for the requests few-step distilled models and LoRA adapters make: guidance at
or below 1 is one forward per step (and one prompt encoded), unfused adapters are memory on
every denoise GPU."""

import re

from pipedit.cli import main
from pipedit.planner.memory import adapter_bytes
from pipedit.planner.models import full_size


def _best(capsys, *flags) -> tuple[float, float]:
    """(latency s, peak GiB) of the best-ranked row."""
    assert main(["plan", "--model", "wan-a14b", "--height", "720", "--width", "1280", "--frames", "81",
                 "--steps", "4", "--top", "1", "--idle-expert", "resident", *flags]) == 0
    row = next(line for line in capsys.readouterr().out.splitlines() if re.match(r"\s+1\s", line))
    figures = row.split()
    return float(figures[6]), float(figures[8])


def test_guidance_one_halves_the_steps_and_adapters_add_their_weights(capsys):
    guided_s, guided_gib = _best(capsys)
    one_pass_s, one_pass_gib = _best(capsys, "--guidance-scale", "1")
    assert one_pass_s < 0.6 * guided_s and one_pass_gib <= guided_gib  # the batch of one forward is half
    _, with_adapters_gib = _best(capsys, "--guidance-scale", "1", "--lora-rank", "64", "--loras", "4")
    # Wan2.2 A14B: 2 experts x 40 blocks x 2 attentions (self, cross) x 4 projections x (5120 + 5120) x 64, bf16.
    assert adapter_bytes(full_size("wan-a14b"), 64) == 2 * 40 * 2 * 4 * 2 * 5120 * 64 * 2
    added = with_adapters_gib - one_pass_gib
    assert 4 * adapter_bytes(full_size("wan-a14b"), 64) / 2 ** 30 <= added <= 1.2 * 4 * adapter_bytes(
        full_size("wan-a14b"), 64) / 2 ** 30 + 0.1


def test_bad_values_are_refused(capsys):
    assert main(["plan", "--model", "wan-14b", "--lora-rank", "-1"]) == 2
    assert "--lora-rank must be 0 or more" in capsys.readouterr().err
    assert main(["plan", "--model", "wan-14b", "--guidance-scale", "-2"]) == 2
    assert "--guidance-scale must be >= 0" in capsys.readouterr().err
