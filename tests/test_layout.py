"""Guards the namespace-package layout: no ``__init__.py`` in the code folders (a ``platform/__init__.py``
would shadow the standard library's ``platform`` module from the repository root, Ray workers included), and
every folder holding ``.py`` files listed in ``pyproject.toml``'s ``packages`` (or a wheel misses it)."""
import ast
import importlib
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = ("platform", "models", "regularizers", "datasets")
MAX_FILE_LINES, MAX_CLASS_LINES = 450, 200


def _code_dirs(folder: str) -> list[Path]:
    return sorted({p.parent for p in (ROOT / folder).rglob("*.py")})


@pytest.mark.parametrize("folder", FOLDERS)
def test_code_folders_are_namespace_packages(folder):
    assert not list((ROOT / folder).rglob("__init__.py")), f"{folder}/ must not contain __init__.py"


@pytest.mark.parametrize("folder", FOLDERS)
def test_every_folder_with_code_is_packaged(folder):
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert setuptools["package-dir"][f"ndebench.{folder}"] == folder
    names = {".".join(("ndebench", *d.relative_to(ROOT).parts)) for d in _code_dirs(folder)}
    assert names - set(setuptools["packages"]) == set(), "add these to [tool.setuptools] packages"


def test_stdlib_platform_not_shadowed_from_repo_root():
    code = "import platform, uuid, torch; print(platform.system()); import ndebench.platform.cli.main"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() in {"Linux", "Darwin", "Windows"}


@pytest.mark.parametrize("folder", FOLDERS)
def test_every_module_is_packaged_and_importable(folder):
    for path in sorted((ROOT / folder).rglob("*.py")):
        name = ".".join(("ndebench", folder, *path.relative_to(ROOT / folder).with_suffix("").parts))
        module = importlib.import_module(name)
        assert Path(module.__file__).resolve() == path.resolve()


def test_platform_files_and_classes_stay_small():
    long = set()
    for path in (ROOT / "platform").rglob("*.py"):
        name, text = path.relative_to(ROOT / "platform").as_posix(), path.read_text()
        if len(text.splitlines()) > MAX_FILE_LINES:
            long.add(name)
        long |= {f"{name}:{node.name}" for node in ast.walk(ast.parse(text))
                 if isinstance(node, ast.ClassDef) and node.end_lineno - node.lineno + 1 > MAX_CLASS_LINES}
    assert not long, f"over {MAX_FILE_LINES} lines a file or {MAX_CLASS_LINES} a class: {sorted(long)}"
