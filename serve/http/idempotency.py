"""`Idempotency-Key` on create: a client that retries a create (its connection dropped before the
answer came) gets the job its first try made, not a second one.

The key names the job: its id is derived from the caller (their API key's digest) and the key, so
the store's primary key makes "one job per key" hold across replicas and restarts with no table
of its own, and two tenants' equal keys never meet. The job keeps a digest of the request it was
made from (the create fields as validated, and the image's bytes): the same key with the same
request answers that job (200, `Idempotent-Replayed: true`, whatever its status now), with a
different request 409 `idempotency_key_reused`. A key holds as long as its job is kept: once the
job is deleted or swept (serve.retention), the key makes a new one."""

from __future__ import annotations

import hashlib
import json
import re

from starlette.datastructures import Headers

from ..contract.errors import invalid
from .errors import idempotency_key_reused

HEADER = "Idempotency-Key"
DIGEST = "request_digest"  # where a job's params keep the digest of the request that made it
_KEY = re.compile(r"[\x21-\x7e]{1,255}")


def key_of(headers: Headers) -> str | None:
    """The request's Idempotency-Key, None without one; 400 when it is not 1-255 visible ASCII characters."""
    value = headers.get(HEADER)
    if value is None:
        return None
    if _KEY.fullmatch(value.strip()) is None:
        raise invalid(f"{HEADER} must be 1 to 255 visible ASCII characters (a UUID is a good key), "
                      f"got {value[:40]!r}", HEADER)
    return value.strip()


def job_id_for(client: str | None, key: str) -> str:
    """The id of the job `key` names for this caller (client_of their API key; None without keys)."""
    return "video_" + hashlib.sha256(f"{client or ''}\0{key}".encode()).hexdigest()[:32]


def request_digest(given: dict, image: bytes | None) -> str:
    """What makes two creates the same request: the fields as validated (so a JSON 5 and a multipart
    "5" agree) and the image's bytes."""
    text = json.dumps(given, sort_keys=True, default=str, ensure_ascii=True)
    image_part = hashlib.sha256(image).hexdigest() if image is not None else "-"
    return hashlib.sha256(f"{text}\0{image_part}".encode()).hexdigest()


def check_same_request(params: dict, digest: str, key: str, video_id: str) -> None:
    """Passes when the stored job (its `params`) was made by this request; 409 otherwise."""
    if not isinstance(params, dict) or params.get(DIGEST) != digest:
        raise idempotency_key_reused(HEADER, key, video_id)
