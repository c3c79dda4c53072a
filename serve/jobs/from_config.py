"""Builds a complete JobService from an engine config: engine loop, job store, the model's
request checks, and recovery of the jobs a previous run left unfinished."""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path

from pipedit.adapter import shape_validator
from pipedit.config import EngineConfig
from pipedit.lora.spec import LoraOffer
from pipedit.runtime.engine import resolve_model_path
from pipedit.runtime.engine_loop import EngineLoop

from ..contract.params import ServiceLimits
from .service import JobService
from .store import JobStore

def model_name_for(config: EngineConfig) -> str:
    """The name clients pass as `model`: the checkpoint folder's name, or the demo model's
    (<family>-demo)."""
    from pipedit.families import DEFAULT

    return Path(config.model.path).name if config.model.path else f"{config.model.name or DEFAULT}-demo"


def data_dir_for(config: EngineConfig) -> Path:
    """serve.data_dir, else <pipedit cache>/serve."""
    from pipedit.local_cache import default_cache_dir

    return Path(config.serve.data_dir) if config.serve.data_dir else default_cache_dir() / "serve"


def limits_for(config: EngineConfig) -> ServiceLimits:
    """The serve section's limits (its fields carry the same names)."""
    return ServiceLimits(**{f.name: getattr(config.serve, f.name) for f in fields(ServiceLimits)})


def store_for(config: EngineConfig, data_dir: str | Path, database_url: str | None = None) -> JobStore:
    """The job store: `database_url`, else serve.database_url, else SQLite `jobs.sqlite` in data_dir."""
    url = database_url or config.serve.database_url
    return JobStore(url) if url else JobStore.in_folder(data_dir)


def open_service(config: EngineConfig, data_dir: str | Path, *, model_name: str | None = None,
                 limits: ServiceLimits = ServiceLimits(), database_url: str | None = None,
                 owner: str | None = None) -> JobService:
    """A running service; stop it with `service.shutdown()`. database_url: any SQLAlchemy URL
    (default: serve.database_url, else SQLite `jobs.sqlite` in data_dir). `owner`: how this
    replica signs the jobs it runs (default: host, pid and a random tag)."""
    model_path = str(resolve_model_path(config.model.path, config.model.name))
    store = store_for(config, data_dir, database_url)
    engine = EngineLoop.from_config(config)
    service = JobService(engine, store, data_dir, model_name or model_name_for(config), config.generation,
                         limits, validate=shape_validator(model_path, config.model.name), lease_s=config.serve.job_lease_s,
                         replicas=config.serve.num_replicas, owner=owner, max_attempts=config.serve.max_attempts,
                         retention=config.serve.retention, loras=LoraOffer.of(config.model))
    service.recover()
    return service
