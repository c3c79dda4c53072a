"""One video whose rank group spans two nodes (parallel.nodes 2): Ulysses 2 inside each node, Ring 2
across them, against the one-rank run. Ring merges blocks with an online softmax, so the latents
differ from one device by float rounding only: 1e-4 relative is the contract's bound."""

import pytest
import torch

from pipedit.cli import main
from pipedit.config import EngineConfig, ModelConfig
from pipedit.request import VideoRequest
from pipedit.runtime.engine import Engine

pytestmark = pytest.mark.slow  # a cluster of three nodes, end-to-end runs
PROMPT, HEIGHT, WIDTH, FRAMES, STEPS, SEED = "a lighthouse at dusk", 80, 112, 17, 2, 5


def _actors(**options):
    """Ray's state API, asked of this cluster (without an address it may pick another instance)."""
    import ray
    from ray.util.state import list_actors

    return list_actors(address=ray.get_runtime_context().gcs_address, limit=1000, raise_on_missing_output=False,
                       **options)


def _rank_nodes(before: set[str]) -> list[str]:
    """Node ids of the rank actors started since `before` (actor ids)."""
    return [a.node_id for a in _actors(filters=[("class_name", "=", "DenoiseWorker")]) if a.actor_id not in before]


def test_a_video_over_two_nodes_equals_one_rank(cluster, demo_checkpoint, tmp_path):
    request = VideoRequest(PROMPT, height=HEIGHT, width=WIDTH, num_frames=FRAMES, steps=STEPS, seed=SEED)
    with Engine(EngineConfig(model=ModelConfig(path=str(demo_checkpoint)))) as engine:
        reference = engine.generate(request).latents
    before = {a.actor_id for a in _actors()}
    latents_file = tmp_path / "latents.pt"
    code = main(["generate", "--prompt", PROMPT, "--model-path", str(demo_checkpoint), "--height", str(HEIGHT),
                 "--width", str(WIDTH), "--num-frames", str(FRAMES), "--steps", str(STEPS), "--seed", str(SEED),
                 "--output", str(tmp_path / "out.mp4"), "--save-latents", str(latents_file),
                 "--ulysses", "2", "--ring", "2", "--nodes", "2", "--address", cluster.address])
    assert code == 0
    latents = torch.load(latents_file)
    assert latents.shape == reference.shape
    assert (latents - reference).abs().max().item() <= 1e-4 * reference.abs().max().item()
    nodes = _rank_nodes(before)
    workers = {worker.node_id for worker in cluster.workers}
    assert len(nodes) == 4 and set(nodes) == workers  # two ranks on each worker node
