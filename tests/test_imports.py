"""The platform's wings import one way, every wing is listed with what it owns and what it may import, a
sweep's driver starts without the report wing, the sub-wings keep to their floor, and the plugin folders
(``models/``, ``regularizers/``, ``datasets/``) import only ``platform/common/`` from the platform.

Read from the source with ``ast`` (top-level and function-level imports alike), so a lazy import inside a
function counts as much as one at the top of the file. The wings are folders without ``__init__.py`` (a
namespace package each), so this table is where each wing states its job and its imports.
"""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PLATFORM = ROOT / "platform"
PREFIX = "ndebench.platform."

# wing: (what it owns, the wings it may import besides itself and the shared wings `common` and `failures`)
WINGS = {
    "": ("the front doors: api.py (the Python API every command goes through) and __main__.py",
         {"cli", "bench", "engine", "cluster", "server", "worker", "spec", "record", "report"}),
    "cli": ("the `ndebench` command line: its arguments, its commands, the config check, the serving commands",
            {"", "bench", "engine", "cluster", "server", "worker", "spec", "record", "report"}),
    "bench": ("`ndebench bench`: speed of a training step, trials per hour, the driver's cost per trial",
              {"", "engine", "cluster", "worker", "spec", "record", "report"}),
    "engine": ("one sweep: its stages, the per-cell searcher, the trainables, progress, provenance",
               {"cluster", "worker", "spec", "record"}),
    "cluster": ("the Ray cluster a sweep runs on: joining, preflight, the Ray session and its log, storage",
                set()),
    "server": ("the MLflow tracking server ndebench starts: processes, basic auth, worker credentials",
               {"record"}),
    "worker": ("one trial, free of Ray and MLflow: its model, data feeds, training loop, evaluation, stacks",
               {"spec"}),
    "spec": ("the sweep config: typed fields and objects, parsing, lint, the protocol's plan", set()),
    "record": ("the MLflow record: its vocabulary, the store, the writers, the one reader, the lease and its fences",
               set()),
    "report": ("study reports: statistics/, paper/ (the paper's data and the comparison), render/ (tables,"
               " HTML, figures) and the analyses at its root", {"record"}),
    "failures": ("what stops a sweep or a trial: exit codes, signals, outages, full disks, deadlines", set()),
    "common": ("the shared vocabulary: typed fields, the registry, plugins, report choices, metrics, weights", set()),
}
SHARED = {"common", "failures"}


def _modules() -> dict[str, Path]:
    """Every platform module by its name below ``ndebench.platform`` (``engine.sweep``, ``cli``)."""
    return {".".join(p.relative_to(PLATFORM).with_suffix("").parts): p for p in sorted(PLATFORM.rglob("*.py"))}


def _layer(module: str) -> str:
    wing, _, rest = module.partition(".")
    return wing if rest else ""


def _imports(path: Path, known: set[str]) -> set[str]:
    """The platform modules ``path`` imports, as names in ``known``."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            found.update(_imports_of(node, known))
    return found


def _imports_of(node: ast.Import | ast.ImportFrom, known: set[str]) -> set[str]:
    """The platform modules one import statement names, as names in ``known``."""
    if isinstance(node, ast.Import):
        names = [a.name for a in node.names]
    elif node.module:
        names = [f"{node.module}.{a.name}" for a in node.names] + [node.module]
    else:
        return set()
    shorts = {name.removeprefix(PREFIX) for name in names if name.startswith(PREFIX)}
    return shorts & known


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: _imports(path, set(modules)) - {name} for name, path in modules.items()}


def test_wings_import_one_way():
    wrong = []
    for module, imported in _graph().items():
        layer = _layer(module)
        for other in sorted(imported):
            target = _layer(other)
            if target == layer or target in WINGS[layer][1] or (target in SHARED and layer != "common"):
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


def test_every_wing_is_listed_and_the_root_holds_only_front_doors():
    wings = {p.relative_to(PLATFORM).parts[0] for p in PLATFORM.glob("*/*.py")}
    assert wings == set(WINGS) - {""}, "list every platform/ folder in WINGS"
    root = sorted(p.name for p in PLATFORM.glob("*.py"))
    assert len(root) <= 4, f"platform/'s root holds only front doors: {root}"
    crowded = {str(d.relative_to(PLATFORM)): n for d in {p.parent for p in PLATFORM.rglob("*.py")}
               if (n := len(list(d.glob("*.py")))) > 15}
    assert not crowded, f"a folder holds at most 15 modules: {crowded}"


def _loaded_with(path: Path, known: set[str]) -> set[str]:
    """The platform modules that importing ``path`` imports: its imports outside functions and outside
    ``if TYPE_CHECKING:``."""
    found: set[str] = set()

    def visit(nodes: list[ast.stmt]) -> None:
        for node in nodes:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            if isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING":
                visit(node.orelse)
                continue
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                found.update(_imports_of(node, known))
            for field in ("body", "orelse", "finalbody", "handlers"):
                visit(getattr(node, field, []))

    visit(ast.parse(path.read_text()).body)
    return found


def test_a_sweeps_driver_starts_without_the_report_wing():
    """What `ndebench run` imports before its sweep (``cli.main`` and the imports of its ``cmd_run``) and all they
    import in turn hold no report module: the report wing (matplotlib, scipy.stats, statsmodels: about 0.75 s of
    CPU) loads when the report is written, so a driver refused, stopped or killed before then never pays for it,
    and the first trial starts sooner."""
    modules = _modules()
    cmd_run, = [node for node in ast.parse(modules["cli.main"].read_text()).body
                if isinstance(node, ast.FunctionDef) and node.name == "cmd_run"]
    started = {m for node in ast.walk(cmd_run) if isinstance(node, (ast.Import, ast.ImportFrom))
               for m in _imports_of(node, set(modules))}
    assert "api" in started
    loaded, todo = set(), ["cli.main", *started]
    while todo:
        module = todo.pop()
        if module not in loaded:
            loaded.add(module)
            todo.extend(_loaded_with(modules[module], set(modules)))
    assert sorted(m for m in loaded if _layer(m) == "report") == []


def _root_of(wing: str, modules: set[str]) -> set[str]:
    """The modules directly in ``wing``'s folder (``report.audit``, not ``report.render.tables``)."""
    return {m for m in modules if m.rpartition(".")[0] == wing}


# sub-wing: (what it owns, the modules it may not import: a wing's root or one module)
SUBWINGS = {
    "report.statistics": ("the statistics: cell summaries, tests, corrections, effect sizes", "report"),
    "report.render": ("tables, sections, HTML and figures, drawn from what the analyses hand over", "report"),
    "report.paper": ("the paper's data and the comparison with it, built on statistics/ and render/", "report"),
    "report.methods": ("many methods over many sets: per-set tests, ranks, Friedman, Bayesian signed-rank", "report"),
    "record.lease": ("the one-driver lease inside the study: its records, heartbeat and fences, on record/store.py",
                     "record.tracking"),
}
# (importer, imported) arrows that still break a sub-wing's rule, each with what would remove it.
BREACHES = {
}


def test_sub_wings_keep_to_their_floor():
    """``report/statistics/``, ``report/render/`` and ``report/paper/`` import no module at ``report/``'s root (the
    analyses, the report's conductor), and ``record/lease/`` does not import ``record/tracking.py``, save the
    arrows listed in BREACHES."""
    graph = _graph()
    wrong = []
    for sub, (_, floor) in SUBWINGS.items():
        banned = _root_of(floor, set(graph)) or {floor}
        for module in sorted(m for m in graph if m.startswith(f"{sub}.")):
            wrong += [f"{module} imports {other}" for other in sorted(graph[module] & banned)
                      if (module, other) not in BREACHES]
    assert not wrong, "\n".join(wrong)


PLUGIN_FOLDERS = ("models", "regularizers", "datasets")


def _platform_imports(path: Path) -> set[str]:
    """The ``ndebench.platform`` modules and packages that ``path`` imports, by their full names."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            parts = [f"{node.module}.{a.name}" for a in node.names] if node.module == "ndebench.platform" else []
            found.update(parts or [node.module])
    return {name for name in found if name == "ndebench.platform" or name.startswith("ndebench.platform.")}


def test_plugin_folders_import_only_common_from_the_platform():
    """``models/``, ``regularizers/`` and ``datasets/`` are what a plugin builds on: from the platform they import
    only ``platform/common/``, so no folder of the package imports them back in a loop (``spec/`` reads the
    regularizers, and the regularizers read ``common/fields.py``)."""
    wrong = [f"{path.relative_to(ROOT)} imports {name}"
             for folder in PLUGIN_FOLDERS for path in sorted((ROOT / folder).rglob("*.py"))
             for name in sorted(_platform_imports(path)) if name.split(".")[2:3] != ["common"]]
    assert not wrong, "\n".join(wrong)
    assert "ndebench.platform.common.fields" in _platform_imports(ROOT / "regularizers" / "checks.py")
