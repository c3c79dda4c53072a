"""Engine configuration: frozen dataclasses validated at construction, loadable from YAML.
Errors say how to fix the setting."""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

import torch
import yaml

from .errors import UserInputError
from .fields import attributes, config_fields, record_class

_DTYPES = {"float32": torch.float32, "fp32": torch.float32, "bfloat16": torch.bfloat16,
           "bf16": torch.bfloat16, "float16": torch.float16, "fp16": torch.float16}
VAE_TILING_MODES = ("auto", "on", "off")
IDLE_EXPERT_MODES = ("resident", "offload")  # model.idle_expert
PROXY_LOCATIONS = ("HeadOnly", "EveryNode")  # serve.proxy_location


@dataclass(frozen=True)
class ModelConfig:
    path: str | None = None  # None: the embedded tiny demo model (of `name`'s family)
    # a pipedit.families name; None: model_index.json decides, else the family release layout found.
    name: str | None = None
    text_encoder_path: str | None = None  # for families.accepting() ones; None: <path>/text_encoder
    device: str = "auto"  # auto: cuda when available, else cpu
    # auto: bfloat16 on cuda; on cpu, what diffusers' from_pretrained gives without torch_dtype
    # (diffusers models in float32, transformers models in their stored dtype), so results match it.
    dtype: str = "auto"
    # Spatially tiled VAE decoding: on, off, or auto (on CUDA, only when an untiled decode is
    # predicted not to fit in free memory; never on CPU, so CPU results equal diffusers').
    vae_tiling: str = "auto"
    # Regional torch.compile of the DiT's repeated blocks on the denoise ranks (runtime/compile.py).
    compile: bool = False
    # Two-expert models (Wan2.2 A14B) on the denoise ranks: resident (both experts on the device) or
    # offload (the idle expert on the host, swapped once per request at the boundary; no-op on CPU).
    idle_expert: str = "resident"
    # LoRA adapters on the DiT for the whole run, applied to every request (--lora PATH[:SCALE[:EXPERTS]]):
    # a list of those strings or of {path, scale, experts} (pipedit.lora.spec), held as LoraSpecs.
    run_loras: tuple = ()
    # Merge model.run_loras into the DiT's weights at load (no per-step cost; the adapters cannot be changed).
    fuse_loras: bool = False
    # Adapters the server offers requests by name (VideoRequest.loras): {NAME: PATH} or {NAME: {path,
    # scale, experts}}, the scale being the name's default; read once at start, as ((name, LoraSpec), ...).
    offered_loras: tuple = ()
    # Offered adapters whose weights stay on the GPU; the least recently used go back to host memory.
    max_gpu_loras: int = 4
    attention: str = "auto"  # auto (fastest exact, measured at start) or a kernel name; sage: 8-bit, lossy
    quantize: str = "none"  # fp8: the DiT's block linears in float8 (pipedit.speed_settings checks both)

    def __post_init__(self):
        from .lora.spec import lora_specs

        if not isinstance(self.compile, bool):
            raise UserInputError(f"model.compile must be true or false, got {self.compile!r}")
        if not isinstance(self.fuse_loras, bool):
            raise UserInputError(f"model.fuse_loras must be true or false, got {self.fuse_loras!r}")
        from .lora.spec import named_loras

        object.__setattr__(self, "run_loras", lora_specs(self.run_loras))
        object.__setattr__(self, "offered_loras", named_loras(self.offered_loras))
        if not _is_int(self.max_gpu_loras) or self.max_gpu_loras < 1:
            raise UserInputError(f"model.max_gpu_loras must be an integer >= 1, got {self.max_gpu_loras!r}")
        if self.fuse_loras and not self.run_loras:
            raise UserInputError("model.fuse_loras needs adapters to fuse: give model.run_loras (--lora PATH[:SCALE])")
        if isinstance(self.vae_tiling, bool):  # YAML 1.1 reads unquoted on/off as booleans
            raise UserInputError(f"vae_tiling must be one of auto, on, off, got {self.vae_tiling}: "
                                 f"quote on and off in YAML ('on', 'off')")
        _check_choice("vae_tiling", self.vae_tiling, VAE_TILING_MODES)
        _check_choice("model.idle_expert", self.idle_expert, IDLE_EXPERT_MODES)
        if self.name is not None:
            from .families import family_names

            _check_choice("model name", self.name, family_names())
        if self.dtype != "auto" and self.dtype not in _DTYPES:
            raise UserInputError(f"dtype '{self.dtype}' is not supported; use auto or one of {', '.join(_DTYPES)}")
        if self.device not in ("auto", "cpu") and not self.device.startswith("cuda"):
            raise UserInputError(f"device '{self.device}' is not supported; use auto, cpu or cuda[:N]")
        from .speed_settings import check_model_speed

        check_model_speed(self)
    def device_type(self) -> str:
        """"cuda" or "cpu". Each rank resolves its own indexed device
        (pipedit.distributed.devices.resolve_rank_device)."""
        if self.device == "auto":
            return "cuda" if torch.cuda.is_available() else "cpu"
        return torch.device(self.device).type

    def torch_dtype(self) -> torch.dtype | None:
        """The dtype to load every component in; None: each library's default (see `dtype`)."""
        if self.dtype == "auto":
            return torch.bfloat16 if self.device_type() == "cuda" else None
        return _DTYPES[self.dtype]


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _check_choice(name: str, value, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise UserInputError(f"{name} must be one of {', '.join(choices)}, got {value!r}")


@dataclass(frozen=True)
class ParallelConfig:
    ulysses: int = 1
    ring: int = 1
    pipesp_chunk: int | str = "auto"  # heads per PipeSP chunk, "auto", or "off" (synchronous Ulysses)
    decode_ranks: int | str = 0  # VAE decode ranks beside the denoise ranks (DeDiVAE); "auto": balance rule
    ranks: int | None = None  # total ranks; needed by decode_ranks "auto", else derived
    aco: str = "auto"  # attention co-processing by idle decode ranks: off, on, auto
    text_encoder: str = "auto"  # where the text encoders live: dit, vae, auto (the model's preference)
    # Latent handoff denoise -> decode: p2p (torch.distributed; measured 5x faster than the Ray
    # object store for 29 MiB latents on gloo, see `pipedit bench handoff`) or object_store.
    handoff: str = "p2p"
    # Classifier-free guidance's two branches on two rank groups of ulysses*ring ranks each
    # (the noise predictions are exchanged every step); needs a model with CFG branches.
    cfg_parallel: bool = False
    # auto: one video's decode is split over the whole decode group when all its ranks are idle
    # (>= 2 decode ranks); off: each decode rank always decodes its own video.
    split_decode: str = "auto"
    # Nodes one rank group spans: its ranks split evenly over them in rank order, so Ulysses groups
    # stay inside a node and Ring crosses nodes (runtime/layout.py checks a layout fits).
    nodes: int = 1

    def __post_init__(self):
        if not _is_int(self.nodes) or self.nodes < 1:
            raise UserInputError(f"parallel.nodes must be an integer >= 1 (nodes one rank group spans), "
                                 f"got {self.nodes!r}")
        for name in ("ulysses", "ring"):
            value = getattr(self, name)
            if not _is_int(value) or value < 1:
                raise UserInputError(f"{name} degree must be an integer >= 1, got {value!r}")
        chunk = self.pipesp_chunk
        if not (chunk in ("auto", "off") or (_is_int(chunk) and chunk >= 1)):
            raise UserInputError(f"pipesp_chunk must be 'auto', 'off' or an integer >= 1, got {chunk!r}")
        self._check_decode()
        _check_choice("aco", self.aco, ("off", "on", "auto"))
        _check_choice("text_encoder", self.text_encoder, ("auto", "dit", "vae"))
        _check_choice("handoff", self.handoff, ("object_store", "p2p"))
        _check_choice("split_decode", self.split_decode, ("auto", "off"))
        if not isinstance(self.cfg_parallel, bool):
            raise UserInputError(f"cfg_parallel must be true or false, got {self.cfg_parallel!r}")
        if self.cfg_parallel and self.decode_ranks == "auto":
            raise UserInputError("decode_ranks auto does not plan CFG-parallel groups yet: give --decode-ranks N "
                                 "with --cfg-parallel")
        if self.cfg_parallel and self.aco == "on":
            raise UserInputError("aco on cannot be combined with cfg_parallel (Aco helpers serve one SP group); "
                                 "use --aco off or drop --cfg-parallel")
        if self.aco == "on" and self.nodes > 1:
            raise UserInputError(f"aco on cannot span {self.nodes} nodes: the decode ranks (the Aco helpers) sit on "
                                 f"the last node, so every attention call would send Q/K/V over the network; use "
                                 f"--aco off or auto (auto leaves Aco off across nodes), or --nodes 1")
        if self.aco == "on" and (self.decode_ranks == 0 or self.ring > 1):
            raise UserInputError("aco on needs decode ranks (--decode-ranks N or auto) and --ring 1 "
                                 "(decode ranks take a share of the Ulysses heads)")

    def _check_decode(self) -> None:
        decode, ranks = self.decode_ranks, self.ranks
        if decode == "auto":
            if not (_is_int(ranks) and ranks >= 2):
                raise UserInputError("decode_ranks auto needs the total rank count: --ranks N with N >= 2")
            return
        if not (_is_int(decode) and decode >= 0):
            raise UserInputError(f"decode_ranks must be 'auto' or an integer >= 0, got {decode!r}")
        if ranks is not None and ranks != self.denoise_ranks + decode:
            raise UserInputError(
                f"ranks {ranks} != ulysses*ring{'*2 (cfg_parallel)' if self.cfg_parallel else ''} "
                f"({self.denoise_ranks}) + decode_ranks ({decode}); "
                f"drop --ranks or make them add up"
            )

    @property
    def denoise_ranks(self) -> int:
        return self.ulysses * self.ring * (2 if self.cfg_parallel else 1)


def _check_generation(self) -> None:
    for spec in config_fields():
        value, name = getattr(self, spec.name), f"generation.{spec.name}"
        if value is None and spec.default is not None:  # null is a request's "the server's default"
            raise UserInputError(f"{name} must be set (default {spec.default!r}), got null")
        object.__setattr__(self, spec.name, spec.check(value, called=name))


def _cache_spec(self):
    from .cache.spec import parse_cache

    return parse_cache(self.cache)


# The `generation` section: one attribute per config field of pipedit.fields, its default the
# field's; `cache` in its canonical string form (cache_spec holds the parsed spec).
GenerationDefaults = record_class(
    "GenerationDefaults", __name__, attributes(config_fields(), lambda spec: spec.default),
    namespace={"__post_init__": _check_generation, "cache_spec": property(_cache_spec)},
    doc="The `generation` section: defaults of the generation fields a request leaves out (their meaning, "
        "bounds and checks are declared once in pipedit.fields, and so are these attributes).")


@dataclass(frozen=True)
class ServeConfig:
    """`pipedit serve`: where it listens, where jobs live, and what one request may ask for."""

    host: str = "127.0.0.1"  # loopback unless told otherwise
    port: int = 8000
    data_dir: str | None = None  # jobs.sqlite and videos/; None: <pipedit cache>/serve
    # The job store: any SQLAlchemy URL; None: SQLite data_dir/jobs.sqlite. Several replicas or
    # nodes share one PostgreSQL store (postgresql+psycopg://...) and one data_dir for the videos.
    database_url: str | None = None
    num_replicas: int = 1  # Serve replicas, each with its own rank group, all taking jobs from the store
    # Where Serve runs HTTP proxies (Ray Serve's names): HeadOnly, one on the head node (the default:
    # one endpoint that outlives any worker node; every proxy binds serve.host:serve.port, and on a
    # one-machine cluster losing the node whose proxy held the port left the API answering nothing),
    # or EveryNode, one on each node with a replica (behind a load balancer of your own).
    proxy_location: str = "HeadOnly"
    job_lease_s: float = 20.0  # a replica that stops renewing its job for this long loses it to another
    api_keys: tuple[str, ...] = ()  # Bearer keys; empty: no authentication
    # Keys that see every key's jobs (get, list, content, events, delete); they must also be api_keys.
    admin_keys: tuple[str, ...] = ()
    # Host header names accepted besides loopback's when bound to loopback (DNS-rebinding guard).
    allowed_hosts: tuple[str, ...] = ()
    model_name: str | None = None  # the `model` field clients send; None: the checkpoint's folder name
    # Swagger UI at /docs: its script comes from a CDN, on the origin where the page keeps the API key.
    docs: bool = False
    # Limits on one request (a request above them gets 400 naming the field), and on the queue (429).
    max_queued: int = 16
    max_queued_per_key: int = 8  # queued jobs of one API key (when api_keys are set)
    max_cost: int = 1280 * 720 * 129 * 50  # height x width x num_frames x steps of one request (400 above)
    max_pixels: int = 1280 * 720 * 129  # height x width x num_frames of one request: memory, whatever the steps
    max_body_bytes: int = 1 << 20  # request body of a JSON route (413 above)
    max_upload_bytes: int = 20 << 20  # request body of a create that uploads an image (multipart; 413 above)
    max_image_pixels: int = 4096 * 4096  # decoded width x height of an input_reference image (400 above)
    max_event_streams: int = 128  # open /events streams of a replica (429 beyond)
    max_event_streams_per_key: int = 8  # open /events streams of one API key (429 beyond)
    event_stream_max_s: float = 300.0  # a stream ends after this long; clients reconnect
    # Slow clients: a request's headers must arrive within header_timeout_s (408, then closed); its
    # body within body_timeout_s of the request's start, plus a second per body_min_rate bytes
    # received (408 body_timeout); an idle keep-alive connection closes after keep_alive_timeout_s;
    # an answer sent before the body was read (413, 429) reads what the client still sends for at
    # most linger_s, so it can read the answer, then closes.
    header_timeout_s: float = 15.0
    # Header floods: a request whose request line and headers pass max_header_bytes, or that sends
    # more than max_header_lines header lines, gets 431 and its connection closes, before the bytes
    # pile up in the proxy. Common servers cap far lower (nginx 4 x 8 KiB buffers, Apache 100 lines
    # of 8 KiB, h11 16 KiB in all); 64 KiB leaves room for big cookies and bearer tokens.
    max_header_bytes: int = 64 << 10
    max_header_lines: int = 100
    body_timeout_s: float = 30.0
    body_min_rate: int = 64 << 10
    keep_alive_timeout_s: int = 5
    linger_s: float = 5.0
    max_attempts: int = 3  # runs of one job (a rank-group failure or a lost lease), then it fails
    retention: float = 7 * 24 * 3600.0  # seconds a finished job and its video are kept (expires_at); 0: forever
    # On SIGTERM or Ctrl-C a replica takes no new job and lets its running jobs finish for this
    # long; what is still running then goes back to the store's queue (the next start runs it).
    stop_grace_s: float = 5.0
    max_steps: int = 100
    max_guidance_scale: float = 30.0
    max_prompt_chars: int = 4000
    max_side: int = 1920  # pixels, height or width
    max_frames: int = 257
    max_fps: int = 60

    def __post_init__(self):
        _check_choice("serve.proxy_location", self.proxy_location, PROXY_LOCATIONS)
        for name in ("api_keys", "admin_keys", "allowed_hosts"):
            value = getattr(self, name)
            if isinstance(value, str) or not all(isinstance(k, str) and k for k in value):
                raise UserInputError(f"serve.{name} must be a list of non-empty strings")
            object.__setattr__(self, name, tuple(value))
        for name in ("api_keys", "admin_keys"):
            for index, key in enumerate(getattr(self, name)):
                if key != key.strip():
                    # A Bearer header's key never carries them (it is stripped when read): such a key
                    # could never authenticate. The key itself stays out of the message (logs).
                    raise UserInputError(f"serve.{name}[{index}] has leading or trailing whitespace, so no request "
                                         f"could ever present it: remove the spaces (the key itself is not shown)")
        if not set(self.admin_keys) <= set(self.api_keys):
            raise UserInputError("serve.admin_keys must also be listed in serve.api_keys (they authenticate as keys)")
        for name in ("port", "max_queued", "max_queued_per_key", "max_cost", "num_replicas", "max_steps",
                     "max_prompt_chars", "max_side", "max_frames", "max_fps", "max_pixels", "max_body_bytes",
                     "max_upload_bytes", "max_image_pixels", "max_event_streams", "max_event_streams_per_key", "max_attempts",
                     "body_min_rate", "keep_alive_timeout_s", "max_header_bytes", "max_header_lines"):
            value = getattr(self, name)
            if not _is_int(value) or value < (0 if name == "port" else 1):
                raise UserInputError(f"serve.{name} must be a positive integer, got {value!r}")
        if not isinstance(self.max_guidance_scale, (int, float)) or self.max_guidance_scale <= 0:
            raise UserInputError(f"serve.max_guidance_scale must be a positive number, got {self.max_guidance_scale!r}")
        for name in ("event_stream_max_s", "retention", "stop_grace_s", "header_timeout_s", "body_timeout_s",
                     "linger_s"):
            value = getattr(self, name)
            at_least_zero = name in ("retention", "linger_s", "stop_grace_s")
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0 or \
                    (not at_least_zero and value == 0):
                raise UserInputError(f"serve.{name} must be a number of seconds ({'>= 0' if at_least_zero else '> 0'}), "
                                     f"got {value!r}")
        if not isinstance(self.docs, bool):
            raise UserInputError(f"serve.docs must be true or false, got {self.docs!r}")
        if isinstance(self.job_lease_s, bool) or not isinstance(self.job_lease_s, (int, float)) or self.job_lease_s < 1:
            raise UserInputError(f"serve.job_lease_s must be a number of seconds >= 1, got {self.job_lease_s!r}")
        if self.database_url is not None and (not isinstance(self.database_url, str) or "://" not in self.database_url):
            raise UserInputError(f"serve.database_url must be an SQLAlchemy URL such as "
                                 f"postgresql+psycopg://user@host:5432/pipedit, got {self.database_url!r}")


# Operation deadlines stay below this share of group_timeout_s, whatever the measured steps.
OP_SHARE_OF_GROUP_TIMEOUT = 0.8


@dataclass(frozen=True)
class ReliabilityConfig:
    """Deadlines and recovery of the rank group (see README, "Reliability")."""

    # Every collective and P2P transfer must complete within
    # max(op_deadline_floor_s, op_deadline_factor x the slowest denoise step measured so far).
    op_deadline_floor_s: float = 60.0
    op_deadline_factor: float = 10.0
    group_timeout_s: float = 300.0  # torch.distributed's own timeout (rendezvous, NCCL watchdog)
    retries: int = 1  # a request that fails with the rank group is run again this many times
    rebuild_timeout_s: float = 600.0  # the most a rank group rebuild (actors start, models load) may take
    # model.compile: the first forward of a video shape the group has not run compiles its graphs;
    # it may take this much longer than a step (the warm-up at the group's start runs under
    # rebuild_timeout_s instead).
    first_compile_s: float = 300.0

    def __post_init__(self):
        for name in ("op_deadline_floor_s", "op_deadline_factor", "group_timeout_s", "rebuild_timeout_s",
                     "first_compile_s"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or isinstance(value, bool) or value <= 0:
                raise UserInputError(f"reliability.{name} must be a positive number, got {value!r}")
        if not _is_int(self.retries) or self.retries < 0:
            raise UserInputError(f"reliability.retries must be an integer >= 0, got {self.retries!r}")
        cap = OP_SHARE_OF_GROUP_TIMEOUT * self.group_timeout_s
        if self.op_deadline_floor_s > cap:
            raise UserInputError(f"reliability.op_deadline_floor_s ({self.op_deadline_floor_s}) must be at most "
                                 f"{OP_SHARE_OF_GROUP_TIMEOUT:g} x group_timeout_s ({cap:g}): operation deadlines "
                                 f"must fire before the process group's own timeout (NCCL's watchdog)")


@dataclass(frozen=True)
class EngineConfig:
    model: ModelConfig = field(default_factory=ModelConfig)
    parallel: ParallelConfig = field(default_factory=ParallelConfig)
    generation: GenerationDefaults = field(default_factory=GenerationDefaults)
    serve: ServeConfig = field(default_factory=ServeConfig)
    reliability: ReliabilityConfig = field(default_factory=ReliabilityConfig)

    def __post_init__(self):
        from .speed_settings import check_engine_speed

        check_engine_speed(self)
    def with_overrides(self, section: str, **values: Any) -> "EngineConfig":
        """A copy with the non-None values replaced in one section (how CLI flags apply)."""
        given = {k: v for k, v in values.items() if v is not None}
        return replace(self, **{section: replace(getattr(self, section), **given)}) if given else self


_SECTIONS = {"model": ModelConfig, "parallel": ParallelConfig, "generation": GenerationDefaults,
             "serve": ServeConfig, "reliability": ReliabilityConfig}


def load_config(path: str | Path) -> EngineConfig:
    file = Path(path)
    if not file.is_file():
        raise UserInputError(f"config file {file} does not exist")
    try:
        data = yaml.safe_load(file.read_text()) or {}
    except yaml.YAMLError as error:
        raise UserInputError(f"config file {file} is not valid YAML: {error}") from error
    if not isinstance(data, dict):
        raise UserInputError(f"config file {file} must be a mapping with sections {', '.join(_SECTIONS)}")
    unknown = set(data) - set(_SECTIONS)
    if unknown:
        raise UserInputError(f"config file {file}: unknown sections {sorted(unknown)}; allowed: {', '.join(_SECTIONS)}")
    return EngineConfig(**{name: _section(file, name, cls, data.get(name) or {}) for name, cls in _SECTIONS.items()})


# Keys renamed since earlier releases: refused, naming the new key (one letter told the two LoRA keys apart).
RENAMED_KEYS = {("model", "lora"): "run_loras (adapters applied to every request)",
                ("model", "loras"): "offered_loras (adapters requests choose by name)"}


def _section(file: Path, name: str, cls: type, values: dict) -> Any:
    for key in values:
        if (name, key) in RENAMED_KEYS:
            raise UserInputError(f"config file {file}: {name}.{key} was renamed: write "
                                 f"{name}.{RENAMED_KEYS[name, key]}")
    allowed = {f.name for f in fields(cls)}
    unknown = set(values) - allowed
    if unknown:
        raise UserInputError(f"config file {file}: unknown keys {sorted(unknown)} in '{name}'; allowed: {sorted(allowed)}")
    return cls(**values)
