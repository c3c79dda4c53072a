"""pipedit.compat: the private-API patches name the versions they were written against (the pins),
warn at import when others are installed, and refuse where a private name they need is gone."""

import re
import warnings
from pathlib import Path

import pytest

from pipedit import compat

ROOT = Path(__file__).resolve().parents[1]


def _pins() -> dict[str, str]:
    pins = {}
    for line in (ROOT / "requirements-cpu.txt").read_text().splitlines():
        match = re.match(r"\s*([A-Za-z0-9_.-]+)(?:\[[^\]]*\])?==(\S+)", line)
        if match:
            pins[match[1].lower()] = match[2]
    return pins


def test_the_patched_versions_are_the_pinned_ones():
    pins = _pins()
    assert {package: pins.get(package) for package in compat.PATCHED_AGAINST} == compat.PATCHED_AGAINST


def test_another_version_is_named_with_what_to_do(monkeypatch):
    found = dict(compat.PATCHED_AGAINST, ray="2.61.0")
    monkeypatch.setattr(compat, "installed_version", found.get)
    with pytest.warns(compat.UntestedDependency) as caught:
        compat.check_versions()
    message = str(caught[0].message)
    assert "ray==2.60.0" in message and "uvicorn==0.54.0" in message and "found ray 2.61.0" in message
    assert "pip install -r requirements-cpu.txt" in message and "uvicorn 0.54.0" not in message


def test_the_pinned_versions_and_absent_packages_pass_quietly(monkeypatch):
    for found in (dict(compat.PATCHED_AGAINST), {"ray": compat.PATCHED_AGAINST["ray"]}):
        monkeypatch.setattr(compat, "installed_version", found.get)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            compat.check_versions()


def test_a_patch_whose_private_name_is_gone_refuses(monkeypatch):
    import uvicorn.config
    from ray._private import ray_constants

    monkeypatch.delattr(ray_constants, "ENABLE_RAY_CLUSTER")
    with pytest.raises(compat.IncompatibleDependency, match="ENABLE_RAY_CLUSTER is gone from ray .*ray==2.60.0"):
        with compat.loopback_node():
            pass
    monkeypatch.delitem(uvicorn.config.HTTP_PROTOCOLS, "auto")
    with pytest.raises(compat.IncompatibleDependency, match=r'HTTP_PROTOCOLS\["auto"\] is gone from uvicorn'):
        compat.use_http_protocol(compat.httptools_protocol())
