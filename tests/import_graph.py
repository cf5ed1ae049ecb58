"""The project's import graph, read with ``ast`` (nothing is imported): for the layout tests.

Every ``import`` counts, at module level or inside a function: a lazy import inside ``build()`` is
still a dependency, and the loops this guards against were all lazy ones. A submodule's implicit
import of its parent package is not an edge (every package's ``__init__`` may import its own
submodules lazily); an explicit ``from package import name`` of the parent is.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("cnnbench", "backends")
FRAMEWORKS = ("torch", "torchvision", "tensorflow", "keras", "jax", "jaxlib", "flax", "optax")


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def project_sources() -> dict[str, str]:
    """Module name -> source text of every module of the two import packages."""
    return {module_name(p): p.read_text() for pkg in PACKAGES for p in sorted((ROOT / pkg).rglob("*.py"))}


def _targets(node: ast.AST, known: set[str], this: str) -> list[str]:
    """Project modules an import statement names (``from a import b`` names ``a.b`` if that is a module)."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names if a.name in known]
    if isinstance(node, ast.ImportFrom):
        if node.level:
            raise ValueError(f"{this}: relative import; the project uses absolute imports only")
        base = node.module or ""
        found = [f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in known]
        rest = [a for a in node.names if f"{base}.{a.name}" not in known]
        if rest and base in known:
            found.append(base)
        return found
    return []


def import_graph(sources: dict[str, str]) -> dict[str, set[str]]:
    known = set(sources)
    graph: dict[str, set[str]] = {}
    for name, text in sources.items():
        edges = set()
        for node in ast.walk(ast.parse(text)):
            edges.update(t for t in _targets(node, known, name) if t != name)
        graph[name] = edges
    return graph


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected component of more than one module (Tarjan), each as a closed path."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                components.append(_cycle_path(sorted(component), graph))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return components


def _cycle_path(component: list[str], graph: dict[str, set[str]]) -> list[str]:
    """One closed path through a component, for the error message (start -> ... -> start)."""
    members = set(component)
    start = component[0]
    path, seen = [start], {start}
    while True:
        nxt = sorted(graph[path[-1]] & members)
        back = [n for n in nxt if n == start]
        if back and len(path) > 1:
            return [*path, start]
        fresh = [n for n in nxt if n not in seen]
        if not fresh:
            return [*path, start]
        path.append(fresh[0])
        seen.add(fresh[0])


def module_level_framework_imports(text: str) -> list[str]:
    """Frameworks imported when the module is imported: at module level or in a class body, also under
    ``if``/``try``; not inside functions, not under ``if TYPE_CHECKING:``."""
    found: list[str] = []

    def scan(statements: list[ast.stmt]) -> None:
        for node in statements:
            if isinstance(node, ast.Import):
                found.extend(a.name for a in node.names if a.name.split(".")[0] in FRAMEWORKS)
            elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in FRAMEWORKS:
                found.append(node.module)
            elif isinstance(node, ast.If):
                if "TYPE_CHECKING" not in ast.unparse(node.test):
                    scan(node.body)
                scan(node.orelse)
            elif isinstance(node, (ast.Try, ast.With, ast.ClassDef)):
                scan(node.body)
                for handler in getattr(node, "handlers", []):
                    scan(handler.body)
                scan(getattr(node, "orelse", []))
                scan(getattr(node, "finalbody", []))

    scan(ast.parse(text).body)
    return found


# The core's rooms, lowest floor first: a room imports only rooms on its own floor or below. A room is a
# package under cnnbench/ (cnnbench/run/ is "run") or a module directly in it (cnnbench/spec.py is "spec").
FLOORS: dict[str, int] = {
    "errors": 0,
    "model": 1, "data": 1,
    "table": 2, "registry": 2, "options": 2, "faults": 2, "gpu_monitor": 2, "process_exit": 2,
    "spec": 3, "envinfo": 3, "runs": 3,
    "backend": 4, "expand": 4, "rows": 4,
    "infer": 5, "report": 5,
    "run": 6, "serve": 6,
    "parity": 7, "cluster": 7,
    "cli_help": 8, "cli_options": 8, "cli_serve": 8, "cli_tools": 8, "cli": 8,
}


def room(module: str) -> str | None:
    """The core room of a module (None for the ``cnnbench`` package itself and for ``backends``)."""
    parts = module.split(".")
    return parts[1] if parts[0] == "cnnbench" and len(parts) > 1 else None


def upward_arrows(graph: dict[str, set[str]]) -> list[str]:
    """Imports from a core room to a room on a higher floor, and from the core to ``backends``."""
    found = []
    for source, targets in sorted(graph.items()):
        here = room(source)
        if here is None:
            continue
        for target in sorted(targets):
            there = room(target)
            if target == "backends" or target.startswith("backends."):
                found.append(f"{source} -> {target} (the core never imports backends)")
            elif there is not None and there != here and FLOORS[there] > FLOORS[here]:
                found.append(f"{source} -> {target} (floor {FLOORS[here]} imports floor {FLOORS[there]})")
    return found
