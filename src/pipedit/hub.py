"""Models and LoRA files named by hub id: `org/name[@revision]` wherever a path is taken
(model.path / --model-path, model.text_encoder_path / --text-encoder-path, --lora and
model.run_loras / model.offered_loras), fetched with huggingface_hub into its cache.

A local path that exists always wins over an id. The library does the rest as users know it: its
progress bars, resumed partial downloads, HF_TOKEN for gated or private repos, HF_HOME (or
HF_HUB_CACHE) for the cache, HF_HUB_OFFLINE=1 to read the cache only. A revision (`@<commit, branch
or tag>`) pins the files; without one the repo's main branch is used (offline: the commit the cache
last saw for it, refs/main).

Only the files a family needs are fetched (the allow patterns of its registry entry,
pipedit.families.Hub). A model id is fetched in two steps: its configs (small) first, which name
the family, then the family's weights. The driver of a multi-rank run only takes the configs (it
plans from them and loads nothing); each rank takes the weights on its own node. Ranks of one node
share its cache (huggingface_hub locks each file while one rank downloads it, so a node downloads
once); a cluster's nodes each fill their own cache, or all read one when HF_HOME names a shared
folder.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from .errors import ModelPathError, UserInputError

# The configs of a checkpoint: model_index.json and every component's configs, tokenizers aside.
CONFIG_FILES = ("*.json", "*/*.json", "*/*/*.json")
LORA_FILES = ("*.safetensors", "adapter_config.json")
_PART = r"[A-Za-z0-9][A-Za-z0-9._-]*"
_FILE_SUFFIXES = (".safetensors", ".json", ".pt", ".pth", ".bin", ".ckpt")  # a missing file, not an id
_ID = re.compile(rf"(?P<repo>{_PART}/{_PART})(?:@(?P<revision>[A-Za-z0-9._-]+))?(?:/(?P<file>[^:]+\.safetensors))?")


@dataclass(frozen=True)
class HubId:
    repo: str  # org/name
    revision: str | None = None  # a commit, branch or tag; None: main
    file: str | None = None  # a LoRA file inside the repo (org/name[@revision]/path/file.safetensors)

    def __str__(self) -> str:
        text = self.repo + (f"@{self.revision}" if self.revision else "")
        return text + (f"/{self.file}" if self.file else "")


def hub_id(text: str | os.PathLike | None) -> HubId | None:
    """The id `text` names, or None: a local path that exists (it always wins), or text that is no
    `org/name[@revision]` (then the caller's own path checks speak)."""
    if text is None or isinstance(text, Path):
        return None
    text = str(text)
    if Path(text).expanduser().exists() or text.startswith((".", "/", "~")):
        return None
    found = _ID.fullmatch(text)
    if found is None or found["repo"].endswith(_FILE_SUFFIXES):
        return None
    return HubId(found["repo"], found["revision"], found["file"])


def cache_folder() -> str:
    """The hub cache this process reads and fills: HF_HUB_CACHE, else HF_HOME/hub, else the
    library's default; read at each call (the library reads them once, at its import)."""
    if os.environ.get("HF_HUB_CACHE"):
        return os.environ["HF_HUB_CACHE"]
    if os.environ.get("HF_HOME"):
        return os.path.join(os.environ["HF_HOME"], "hub")
    from huggingface_hub import constants

    return str(constants.HF_HUB_CACHE)


def offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")


def fetch(ident: HubId, patterns: tuple[str, ...], what: str) -> Path:
    """The snapshot folder of `ident` holding (at least) the files matching `patterns`, fetched
    into the cache where missing. ModelPathError naming the id and the cache when it cannot be."""
    from huggingface_hub import snapshot_download
    from huggingface_hub import errors

    try:
        folder = snapshot_download(ident.repo, revision=ident.revision, allow_patterns=list(patterns),
                                   cache_dir=cache_folder(), local_files_only=offline())
    except (errors.LocalEntryNotFoundError, errors.CachedRepoTreeNotFoundError) as error:
        raise ModelPathError(
            f"{what} {ident} is not in the hub cache {cache_folder()} and HF_HUB_OFFLINE is set (nor is it a local "
            f"path): fetch it once with network access (unset HF_HUB_OFFLINE), or point HF_HOME at a cache holding it ({error})") from None
    except errors.GatedRepoError:
        raise ModelPathError(f"{what} {ident} is gated: accept its terms on the hub and set HF_TOKEN") from None
    except errors.RepositoryNotFoundError:
        raise ModelPathError(f"{what} {ident}: no local path and no such repository on the hub (or it is private: "
                             f"set HF_TOKEN)") \
            from None
    except errors.RevisionNotFoundError:
        raise ModelPathError(f"{what} {ident}: the repository has no revision {ident.revision!r}") from None
    except errors.HfHubHTTPError as error:
        raise ModelPathError(f"{what} {ident} could not be fetched into {cache_folder()}: {error}") from None
    return Path(folder)


def model_configs(path: str | Path) -> Path:
    """`path` as it is (a local folder, or not an id), else the snapshot of the id with its
    configs only: what a driver plans from without loading the model."""
    ident = hub_id(path)
    if ident is None:
        return Path(path)
    return _configs(ident)


def _configs(ident: HubId) -> Path:
    folder = fetch(ident, CONFIG_FILES, "model")
    if not any(folder.iterdir()):
        raise ModelPathError(f"model {ident}: the repository holds no configs (model_index.json ...) in "
                             f"{folder}; expected a diffusers-layout checkpoint")
    return folder


def model_folder(path: str | Path, name: str | None = None) -> Path:
    """`path` as it is (a local folder, or not an id), else the snapshot of the id holding what its
    family loads (its configs name the family unless `name` does). Called where the weights load:
    on a rank's node."""
    ident = hub_id(path)
    if ident is None:
        return Path(path)
    from .families import family_of_checkpoint

    entry = family_of_checkpoint(_configs(ident), name)
    return fetch(ident, entry.hub.files if entry.hub else ("*",), "model")


def text_encoder_folder(path: str | None, family_name: str) -> str | None:
    """model.text_encoder_path as a local folder: an id is fetched with the family's text encoder files."""
    ident = hub_id(path)
    if ident is None:
        return path
    from .families import family

    entry = family(family_name)
    patterns = entry.hub.text_encoder_files if entry.hub else ("*",)
    return str(fetch(ident, patterns, "text encoder"))


def lora_file(path: str) -> Path:
    """A LoRA file as a local path: an id names a repo holding one .safetensors file (or the file
    after it: org/name[@revision]/dir/file.safetensors)."""
    ident = hub_id(path)
    if ident is None:
        return Path(path)
    folder = fetch(ident, (ident.file,) if ident.file else LORA_FILES, "LoRA")
    if ident.file:
        return folder / ident.file
    found = sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*.safetensors"))
    if len(found) != 1:
        raise UserInputError(f"LoRA {ident} holds {len(found)} .safetensors files ({', '.join(found) or 'none'}): "
                             f"name one as {ident.repo}[@revision]/FILE")
    return folder / found[0]


# Filesystems every node of a cluster can mount: a hub cache on one is filled once for all nodes.
SHARED_FILESYSTEMS = frozenset({"nfs", "nfs4", "cifs", "smb3", "lustre", "gpfs", "beegfs", "ceph", "glusterfs",
                                "fuse.sshfs", "fuse.juicefs", "fuse.gcsfuse", "fuse.s3fs", "fuse.ceph", "9p"})


def mount_type(folder: str, mounts: str | None = None) -> str | None:
    """The filesystem type of the mount holding `folder` (the longest mount point above it in
    /proc/mounts, or in `mounts`, text in that format); None where it cannot be read."""
    if mounts is None:
        try:
            mounts = Path("/proc/mounts").read_text()
        except OSError:
            return None
    target = os.path.abspath(os.path.expanduser(folder))
    best, kind = "", None
    for line in mounts.splitlines():
        fields = line.split()
        if len(fields) < 3:
            continue
        point = fields[1].replace("\\040", " ")
        inside = target == point or target.startswith(point.rstrip("/") + "/")
        if inside and len(point) > len(best):
            best, kind = point, fields[2]
    return kind


def ids_in(model) -> list[str]:
    """Every hub id a ModelConfig names: its path, text encoder and LoRA files."""
    paths = [model.path, model.text_encoder_path, *(s.path for s in model.run_loras),
             *(spec.path for _name, spec in model.offered_loras)]
    return [str(ident) for ident in (hub_id(p) for p in paths) if ident is not None]


def cluster_fetch_plan(model, nodes: int, mounts: str | None = None) -> str | None:
    """Where a served cluster's ranks take the hub ids `model` names from: one shared cache, or one
    per node (the placement check prints it). None when it names no id."""
    ids = ids_in(model)
    if not ids:
        return None
    cache = cache_folder()
    kind = mount_type(cache, mounts)
    named = f"hub ids {', '.join(ids)}"
    if nodes <= 1:
        return f"{named}: fetched once into this node's cache {cache}"
    if kind in SHARED_FILESYSTEMS:
        return (f"{named}: read from one shared cache {cache} ({kind}), fetched once for the {nodes} nodes "
                f"(every node must mount it at that path)")
    return (f"{named}: each of the {nodes} nodes fetches them into its own cache {cache} "
            f"({kind or 'filesystem unknown'}, not a shared one); point HF_HOME at a folder every node mounts "
            f"to fetch once")
