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


# pipedit.serve's layers, bottom first: a module may import its own layer and the ones before it.
SERVE_LAYERS = ("contract", "jobs", "http", "ray_app")
# The modules of pipedit.serve itself: import paths Ray is given by name, above every layer.
SERVE_ENTRY_POINTS = ("pipedit.serve.deployment", "pipedit.serve.header_timeout")


def serve_layer(module: str) -> int | None:
    """The module's layer (its index in SERVE_LAYERS; pipedit.serve's own modules are above all of
    them); None outside pipedit.serve."""
    parts = module.split(".")
    if parts[:2] != ["pipedit", "serve"]:
        return None
    return SERVE_LAYERS.index(parts[2]) if len(parts) > 2 and parts[2] in SERVE_LAYERS else len(SERVE_LAYERS)


def upward_imports(graph: dict[str, set[str]]) -> dict[str, list[str]]:
    """{module: the modules of higher serve layers it imports}, for the modules that import any."""
    found = {}
    for module, targets in graph.items():
        layer = serve_layer(module)
        higher = sorted(t for t in targets if layer is not None and (serve_layer(t) or 0) > layer)
        if higher:
            found[module] = higher
    return found


def test_the_layer_check_finds_an_upward_import():
    graph = {"pipedit.serve.jobs.store": {"pipedit.serve.http.app", "pipedit.serve.contract.errors"},
             "pipedit.serve.http.app": {"pipedit.serve.jobs.store"}, "pipedit.serve.deployment": {"pipedit.serve.ray_app.x"},
             "pipedit.config": {"pipedit.serve.http.app"}}
    assert upward_imports(graph) == {"pipedit.serve.jobs.store": ["pipedit.serve.http.app"]}


def test_serve_layers_import_downwards_only():
    assert upward_imports(import_graph()) == {}


def test_every_serve_module_is_in_a_layer():
    """A new module of pipedit.serve goes into the layer that fits what it imports (or is an entry point)."""
    flat = {name for name in import_graph() if serve_layer(name) == len(SERVE_LAYERS)}
    assert flat - {"pipedit.serve"} == set(SERVE_ENTRY_POINTS)
