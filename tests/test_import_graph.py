"""No import circle among pipedit's modules, and no subsystem imports the command line.

Every import counts, the ones inside functions too (a lazy import still ties two modules: each
needs the other to be understood or changed). Packages map as pyproject.toml's package-dir does."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE_DIRS = {"pipedit": ROOT / "src" / "pipedit", "pipedit.integrations": ROOT / "integrations",
                "pipedit.serve": ROOT / "serve"}


def _modules() -> dict[str, Path]:
    found = {}
    for prefix, folder in PACKAGE_DIRS.items():
        for path in folder.rglob("*.py"):
            parts = list(path.relative_to(folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join([prefix, *parts])] = path
    return found


def _imported(module: str, path: Path, known: set[str]) -> set[str]:
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    targets = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            # `from pkg import sub` imports the submodule when there is one, else a name of pkg
            names = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base for alias in node.names]
        else:
            continue
        for name in names:
            while name and name not in known:
                name = name.rpartition(".")[0]
            if name and name != module:
                targets.add(name)
    return targets


def import_graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: _imported(name, path, set(modules)) for name, path in modules.items()}


def import_circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on_stack, circles = {}, {}, [], set(), []

    def visit(node):
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in graph[node]:
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return circles


def test_the_walker_finds_a_circle_and_lazy_imports():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert import_circles(graph) == [["a", "b", "c"]]
    real = import_graph()
    assert "pipedit.config" in real["pipedit.cli.flags"]  # imported inside a function


def test_no_import_circle():
    assert import_circles(import_graph()) == []


def test_no_subsystem_imports_the_command_line():
    offenders = {module: sorted(t for t in targets if t == "pipedit.cli" or t.startswith("pipedit.cli."))
                 for module, targets in import_graph().items()
                 if not (module == "pipedit.cli" or module.startswith("pipedit.cli."))}
    assert {module: found for module, found in offenders.items() if found} == {}


def test_every_package_is_listed_in_pyproject():
    """pyproject.toml lists packages by hand (two live outside src/): a package missing there
    imports in an editable install and is absent from a wheel."""
    import tomllib

    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {name for name, path in _modules().items() if path.name == "__init__.py"}
    assert found - listed == set()
