"""What every rank does, whatever its role: join the world, load its model parts, report."""

from __future__ import annotations

import contextlib
import gc
import os
import re
import resource
import sys
from collections.abc import Mapping
from dataclasses import asdict, replace
from datetime import timedelta
from pathlib import Path

import torch

from .. import device_time, faults
from ..adapter import check_inputs, load_adapter
from ..config import EngineConfig
from ..distributed.context import ParallelContext
from ..distributed.devices import gpu_identity, resolve_rank_device
from ..distributed.rank_state import RankState
from ..distributed.spawn import free_tcp_port
from ..errors import InvalidRequestError, UserInputError
from ..guidance import guidance_applies
from ..images import check_image_fits, load_image
from ..logs import quiet_libraries
from ..lora.inject import apply_loras
from ..lora.switch import resolve as resolve_loras
from ..request import VideoRequest
from .layout import WorldLayout
from .split_decode import DecodeGroup, make_decode_group

_INPUT_ERRORS = (ValueError, OverflowError, MemoryError)  # of an input's preparation: see encode_request


def encode_request(adapter, request: VideoRequest) -> dict[str, torch.Tensor]:
    """The adapter's encode_prompt with the inputs the request carries."""
    inputs = {}
    # check_inputs lets a blank negative prompt through for models without one (it asks for
    # nothing); their encode_prompt takes no such argument. A model with a negative branch
    # encodes it only for a request with guidance (a negative prompt given without is unused, as
    # in the reference pipelines).
    if adapter.capabilities.negative_prompt:
        inputs["guided"] = guidance_applies(request.guidance_scale)
        if request.negative_prompt is not None:
            inputs["negative_prompt"] = request.negative_prompt
    if request.image is not None:  # the image condition depends on the video's size and frames
        image = load_image(request.image)
        check_image_fits(image.size, (request.width, request.height))
        inputs.update(image=image, shape=request.shape)
    if adapter.capabilities.has_sound:  # the sound's length follows the video's frames and fps
        inputs["shape"] = request.shape
    try:
        return adapter.encode_prompt(request.prompt, **inputs)
    except UserInputError:
        raise
    except _INPUT_ERRORS as error:
        # Raised by the inputs' own preparation (an image's resize, a tokenizer): the request
        # fails so every time it runs. A request error: failed at once with the error's type and
        # text, never retried, the group left intact. (CUDA out-of-memory is a RuntimeError.)
        raise InvalidRequestError(f"encoding the request's inputs failed: {type(error).__name__}: {error}") from error


class RankWorker:
    def __init__(self, config: EngineConfig, layout: WorldLayout, rank: int = 0,
                 environment: Mapping[str, str] | None = None):
        """`environment`: where the fault injection switch is read (default: this process's, as the
        executor sets it for its rank actors)."""
        self.config = config
        self.layout = layout
        self.rank = rank
        self.device = resolve_rank_device(config.model.device)  # indexed on CUDA (cuda:N)
        self.adapter = None
        self.model_path: str | None = None  # the model folder on this rank's node (find_model)
        self.ctx: ParallelContext | None = None  # the SP context; None on decode ranks
        self.decode_group: DecodeGroup | None = None  # the decode ranks' group, for split decodes
        self._stream_for_encoding = None  # CUDA only, made at the first encode
        floor = config.reliability.op_deadline_floor_s if layout.world_size > 1 else None
        self.state = RankState.for_rank(rank, floor, os.environ if environment is None else environment)

    def set_op_deadline(self, seconds: float) -> None:
        """The per-operation deadline of this rank's collectives and transfers (the driver
        raises it as it measures slower steps)."""
        self.state.deadline.seconds = seconds

    def identity(self) -> tuple[str, str | None]:
        """(node, physical GPU or None): the executor refuses two ranks on one GPU before NCCL does."""
        import ray.util

        return ray.util.get_node_ip_address(), gpu_identity(self.device)

    def find_model(self, model_path: str) -> str:
        """The model folder as this rank reads it, on its own node's disk: the embedded demo model
        is built here when the engine runs it (model.path unset); any other folder must be readable
        here, else the start fails naming the node and the path (on a cluster every node needs
        its own copy, or a shared folder mounted at the same path). A hub id (model.path) is
        fetched here into this node's hub cache: once per node, its ranks share the download
        (pipedit.hub); a shared HF_HOME is read by every node."""
        from ..families import demo_model
        from ..hub import hub_id, model_folder

        if self.config.model.path is None:
            path = demo_model(self.config.model.name)  # built once per node
        elif hub_id(self.config.model.path) is not None:
            try:
                path = model_folder(self.config.model.path, self.config.model.name)
            except UserInputError as error:
                raise UserInputError(f"rank {self.rank} on node {_node()}: {error}") from None
        else:
            path = Path(model_path)
        if not (path.is_dir() and os.access(path, os.R_OK | os.X_OK)):
            import ray.util

            raise UserInputError(f"rank {self.rank} on node {ray.util.get_node_ip_address()} cannot read the model "
                                 f"folder {path}: copy the model to that path on every node of the cluster, or "
                                 f"mount a shared folder there")
        self.model_path = str(path)
        return self.model_path

    def check_fault_folder(self) -> None:
        """Fault injection's `once` markers live in one folder that every rank must see (on several
        nodes: a shared folder, given as PIPEDIT_FAULTS_ONCE_DIR); fails the start naming the node."""
        folder = self.state.faults.once_dir
        if folder and not os.path.isdir(folder):
            import ray.util

            raise UserInputError(f"rank {self.rank} on node {ray.util.get_node_ip_address()} cannot see the fault "
                                 f"injection state folder {folder}: set {faults.ONCE_DIR_ENV} to a folder every "
                                 f"node shares")

    def rendezvous_address(self) -> str:
        """torch.distributed's init_method, chosen on rank 0's node: tcp://node:port (its store
        listens on every interface, as ranks on several nodes need); on a loopback node (an
        instance of our own: one machine, see ray_instance) a file store in a new folder instead,
        so that nothing listens beyond loopback."""
        import ipaddress
        import tempfile

        import ray.util

        node = ray.util.get_node_ip_address()
        if ipaddress.ip_address(node).is_loopback:
            return f"file://{tempfile.mkdtemp(prefix='pipedit-rendezvous-')}/store"
        return f"tcp://{node}:{free_tcp_port('')}"

    def _join(self, model_path: str, rendezvous: str | None) -> None:
        quiet_libraries()
        model_path = self.find_model(model_path)
        if self.layout.world_size > 1:
            self._init_process_group(rendezvous)
            # Collective on every rank, decode ranks included (they get None back).
            self.ctx = ParallelContext.create(
                self.layout.ulysses, self.layout.ring, ranks=self.layout.denoise_ranks, device=self.device,
                cfg_degree=self.layout.cfg, state=self.state,
            )
            # Collective too: every rank enters the decode group's creation, in this order.
            self.decode_group = make_decode_group(self.layout.decode_ranks, self.layout.split_decode, self.state)
        model = self.config.model
        self.adapter = load_adapter(model_path, parts=self.layout.parts(self.rank), device=self.device,
                                    dtype=model.torch_dtype(), vae_tiling=model.vae_tiling, model=model.name,
                                    text_encoder_path=model.text_encoder_path, idle_expert=model.idle_expert)
        apply_loras(self.adapter, model.run_loras, model.fuse_loras, model.offered_loras)  # before any hook or compile

    def _init_process_group(self, rendezvous: str | None) -> None:
        """`rendezvous`: rank 0's rendezvous_address."""
        import torch.distributed as dist

        torch.set_num_threads(cpu_threads_per_rank(self.layout.ranks_per_node))  # this node's ranks share its cores
        options = {}
        if self.device.type == "cuda":
            torch.cuda.set_device(self.device)
            # device_id binds the rank to its GPU and creates the NCCL communicator now (eager
            # init): one communicator for the group, and the first batched P2P need not be a
            # collective call of every rank (lazy init requires that).
            options["device_id"] = self.device
        dist.init_process_group(
            backend="nccl" if self.device.type == "cuda" else "gloo",
            init_method=rendezvous, rank=self.rank, world_size=self.layout.world_size,
            # Above every operation deadline: it only backs them up (and bounds the rendezvous).
            timeout=timedelta(seconds=self.config.reliability.group_timeout_s), **options,
        )

    def encode_prompt(self, request: VideoRequest) -> dict[str, torch.Tensor]:
        """On the rank holding the text encoders; validates the request first (cheap, and before
        any rank spends time on it)."""
        self.adapter.validate(request.shape, request.steps)
        check_inputs(self.adapter, **request.field_values())
        resolve_loras(self.config.model, request)  # before any rank spends time on it
        self.state.faults.enter(phase="encode", prompt=request.prompt)
        self.state.faults.check()
        with self._encode_stream():
            encoded = {k: v.cpu() for k, v in encode_request(self.adapter, request).items()}
            # The encode's end (encode_s): its own stream only, never a decode running beside it.
            device_time.wait_for_device(self.device, stream_only=True)
            return encoded

    def _encode_stream(self):
        """Encoding's own CUDA stream. On a decode rank the next request's prompt is encoded in a
        second actor thread while a decode runs; on the decode's (default) stream its kernels would
        queue behind the VAE's, which is the wait DeDiVAE exists to remove. `.cpu()` on the results
        synchronizes this stream only."""
        if self.device.type != "cuda":
            return contextlib.nullcontext()
        if self._stream_for_encoding is None:
            self._stream_for_encoding = torch.cuda.Stream(self.device)
            # Once: the text encoders' weights were written on the default stream.
            self._stream_for_encoding.wait_stream(torch.cuda.default_stream(self.device))
        return torch.cuda.stream(self._stream_for_encoding)

    def loaded_parameters(self) -> dict[str, int]:
        """Parameter count of every loaded model component (what this rank holds in memory)."""
        return {
            name: sum(p.numel() for p in module.parameters())
            for name, module in self.adapter.components.items() if isinstance(module, torch.nn.Module)
        }

    def device_name(self) -> str | None:
        """The GPU's model name as the driver reports it ("NVIDIA H100 80GB HBM3"), None on CPU."""
        return torch.cuda.get_device_name(self.device) if self.device.type == "cuda" else None

    def matmul_rate(self) -> dict:
        """This rank's device's dense matmul rate (pipedit.device_time.MatmulRate's fields), what
        a bench compares its figures with: measured where the work runs (a driver holds no GPU;
        on a CPU, with this rank's threads). Call it between requests, never during one."""
        return asdict(replace(device_time.measure_matmul_rate(self.device), rank=self.rank))

    def torch_threads(self) -> int:
        return torch.get_num_threads()

    def peak_host_rss_bytes(self) -> int:
        """Peak resident host memory of this rank's process since it became this rank (loading
        included) or since the last reset_peak_memory: Linux's VmHWM, which rebind resets for a
        reused process; elsewhere the process's lifetime peak."""
        try:
            return _status_peak_rss()
        except (OSError, AttributeError):
            return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux reports KiB

    def peak_memory_bytes(self) -> int:
        if self.device.type == "cuda":
            return int(torch.cuda.max_memory_allocated(self.device))
        return self.peak_host_rss_bytes()

    def reset_peak_memory(self) -> None:
        """Starts a new peak for peak_memory: CUDA peak stats, or on Linux the process's peak
        resident memory (VmHWM, reset through /proc/self/clear_refs)."""
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
            return
        try:
            Path("/proc/self/clear_refs").write_text("5")
        except OSError:
            pass  # no /proc: peak_memory reports the lifetime peak and says so

    def peak_memory(self) -> tuple[int, str]:
        """(bytes, what was measured) since the last reset_peak_memory."""
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            return int(torch.cuda.max_memory_allocated(self.device)), "cuda_max_memory_allocated"
        try:
            return _status_peak_rss(), "process_peak_rss"
        except (OSError, AttributeError):
            return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, "process_lifetime_peak_rss"

    def close(self) -> None:
        import torch.distributed as dist

        if dist.is_initialized():
            dist.destroy_process_group()

    def release(self) -> None:
        """Ends this rank's part in its group and drops all it loaded; the process stays, idle,
        for the next group (pipedit.runtime.kept_ranks), which calls rebind."""
        device = self.device
        self.close()
        self.__dict__.clear()  # the adapter, the contexts, the caches: nothing of this group's remains
        gc.collect()
        if "torch._dynamo" in sys.modules:
            # Compiled graphs hold the old modules, and dynamo's recompile limit counts per process:
            # the next group's compiled engine would fall back to eager part way through.
            torch._dynamo.reset()
        if device.type == "cuda":
            torch.cuda.empty_cache()

    def rebind(self, config: EngineConfig, layout: WorldLayout, rank: int, fault_env: Mapping[str, str]) -> None:
        """This (released) process becomes `rank` of a new group, as a new actor would, with the
        new group's fault switch (`fault_env`, empty for none) in place of the one it started
        with; the peak memory figures start again here."""
        self.__init__(config, layout, rank, environment=fault_env)
        self.reset_peak_memory()


def _status_peak_rss() -> int:
    """This process's peak resident memory since it started or since its peak was last reset
    (/proc/self/clear_refs), in bytes: Linux's VmHWM."""
    status = Path("/proc/self/status").read_text()
    return int(re.search(r"^VmHWM:\s+(\d+) kB", status, re.MULTILINE).group(1)) * 1024


CPU_THREADS_ENV = "PIPEDIT_CPU_THREADS"


def cpu_threads_per_rank(ranks_on_node: int) -> int:
    """torch threads of one rank of a multi-rank world: PIPEDIT_CPU_THREADS where set, else the
    node's cores shared evenly among the ranks it holds (WorldLayout.ranks_per_node: on several
    nodes a rank shares its cores with its own node's ranks only, not the whole world's)."""
    given = os.environ.get(CPU_THREADS_ENV)
    if given:
        if not given.isdigit() or int(given) < 1:
            raise UserInputError(f"{CPU_THREADS_ENV}={given!r}: expected a whole number of threads >= 1")
        return int(given)
    return max(1, (os.cpu_count() or 1) // ranks_on_node)


def _node() -> str:
    """This process's node (its Ray address; "this machine" outside Ray)."""
    try:
        import ray.util

        return ray.util.get_node_ip_address()
    except Exception:  # in-process ranks of a one-rank run have no Ray node
        return "this machine"
