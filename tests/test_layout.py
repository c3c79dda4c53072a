"""The house rules a reader relies on: small files, a family's code in its own package, and no
module-level state that a second rank, engine or app in the same process would share.

A family is named only inside integrations/ (its package) and by the registry that discovers the
packages (pipedit.families); the core reaches family code through the registry's targets."""

import ast
import re
from pathlib import Path

from test_import_graph import PACKAGE_DIRS, import_graph

ROOT = Path(__file__).resolve().parents[1]
CORE = [PACKAGE_DIRS["pipedit"], PACKAGE_DIRS["pipedit.serve"]]
REGISTRY = PACKAGE_DIRS["pipedit"] / "families.py"
LINE_LIMIT = 400


def _python_files(*folders: Path) -> list[Path]:
    return sorted(path for folder in folders for path in folder.rglob("*.py"))


def test_every_file_is_under_the_line_limit():
    files = _python_files(*PACKAGE_DIRS.values(), ROOT / "tests")
    long = {str(path.relative_to(ROOT)): n for path in files if (n := len(path.read_text().splitlines())) >= LINE_LIMIT}
    assert long == {}


def test_no_core_module_names_a_family():
    from pipedit import families

    names = sorted(families.family_names(), key=len, reverse=True)
    # A family's name as a word of its own (`wan` but not `swan`), or its package's name.
    packages = {name.replace("-", "_").replace(".", "") for name in names}
    spelled = re.compile(r"(?<!\w)(" + "|".join(map(re.escape, [*names, *packages])) + r")(?!\w)")
    found = {}
    for path in _python_files(*CORE):
        if path == REGISTRY:
            continue
        hits = [n for n, line in enumerate(path.read_text().splitlines(), 1) if spelled.search(line)]
        if hits:
            found[str(path.relative_to(ROOT))] = hits
    assert found == {}


def test_only_the_registry_reaches_into_the_integrations():
    offenders = {module: sorted(t for t in targets if t.startswith("pipedit.integrations"))
                 for module, targets in import_graph().items()
                 if not module.startswith("pipedit.integrations") and module != "pipedit.families"}
    assert {module: found for module, found in offenders.items() if found} == {}


def _module_state_writes(tree: ast.Module) -> list[int]:
    """Lines that rebind a module global from a function (`global x`) or write globals()."""
    lines = [node.lineno for node in ast.walk(tree) if isinstance(node, ast.Global)]
    lines += [node.lineno for node in ast.walk(tree)
              if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "globals"]
    return lines


def test_no_module_level_state_outside_the_registries():
    # The family registry fills itself once, on first use; the kept rank group is this process's
    # rank processes, which any engine the process starts may take (runtime/kept_ranks.py).
    allowed = {REGISTRY, ROOT / "src" / "pipedit" / "runtime" / "kept_ranks.py"}
    found = {}
    for path in _python_files(*PACKAGE_DIRS.values()):
        if path not in allowed and (lines := _module_state_writes(ast.parse(path.read_text()))):
            found[str(path.relative_to(ROOT))] = lines
    assert found == {}
