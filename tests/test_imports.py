"""The platform's wings import one way: entry -> engine -> worker -> spec, engine -> record, report -> record.

Read from the source with ``ast`` (top-level and function-level imports alike), so a lazy import inside a
function counts as much as one at the top of the file.
"""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PLATFORM = ROOT / "platform"
PREFIX = "ndebench.platform."

ENTRY = {"api", "cli", "cliargs", "cliserve", "bench", "benchtrials", "benchthroughput", "__main__"}
# What each layer may import besides itself and the shared leaves (registry, plugins, fields, metrics, weights).
ALLOWED = {
    "entry": {"engine", "worker", "spec", "record", "report"},
    "engine": {"worker", "spec", "record"},
    "worker": {"spec"},
    "spec": set(),
    "record": set(),
    "report": {"record"},
    "leaf": set(),
}


def _modules() -> dict[str, Path]:
    """Every platform module by its name below ``ndebench.platform`` (``engine.sweep``, ``cli``)."""
    return {".".join(p.relative_to(PLATFORM).with_suffix("").parts): p for p in sorted(PLATFORM.rglob("*.py"))}


def _layer(module: str) -> str:
    wing, _, rest = module.partition(".")
    if rest:
        return wing
    if module in ENTRY:
        return "entry"
    return "leaf"


def _imports(path: Path, known: set[str]) -> set[str]:
    """The platform modules ``path`` imports, as names in ``known``."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names = [f"{node.module}.{a.name}" for a in node.names] + [node.module]
        else:
            continue
        for name in names:
            short = name.removeprefix(PREFIX)
            if name.startswith(PREFIX) and short in known:
                found.add(short)
    return found


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: _imports(path, set(modules)) - {name} for name, path in modules.items()}


def test_wings_import_one_way():
    wrong = []
    for module, imported in _graph().items():
        layer = _layer(module)
        for other in sorted(imported):
            target = _layer(other)
            if target in {layer, "leaf"} or target in ALLOWED[layer]:
                continue
            wrong.append(f"{module} ({layer}) imports {other} ({target})")
    assert not wrong, "\n".join(wrong)


def test_no_import_circle():
    graph = _graph()
    state: dict[str, int] = {}
    circles: list[list[str]] = []

    def visit(module: str, path: list[str]) -> None:
        state[module] = 1
        for other in sorted(graph[module]):
            if state.get(other) == 1:
                circles.append([*path[path.index(other):], other] if other in path else [module, other])
            elif other not in state:
                visit(other, [*path, other])
        state[module] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module, [module])
    assert not circles, "\n".join(" -> ".join(c) for c in circles)
