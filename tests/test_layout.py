"""Guards the flat namespace-package layout (design.md section 1)."""
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = ("platform", "models", "regularizers", "datasets")


@pytest.mark.parametrize("folder", FOLDERS)
def test_code_folders_are_namespace_packages(folder):
    assert not list((ROOT / folder).rglob("__init__.py")), f"{folder}/ must not contain __init__.py"
    assert not [p for p in (ROOT / folder).iterdir()
                if p.is_dir() and p.name != "__pycache__"], f"{folder}/ must stay flat"


def test_stdlib_platform_not_shadowed_from_repo_root():
    code = "import platform, uuid, torch; print(platform.system()); import ndebench.platform.cli"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() in {"Linux", "Darwin", "Windows"}


@pytest.mark.parametrize("folder", FOLDERS)
def test_every_module_is_packaged_and_importable(folder):
    import importlib

    for path in sorted((ROOT / folder).glob("*.py")):
        module = importlib.import_module(f"ndebench.{folder}.{path.stem}")
        assert Path(module.__file__).resolve() == path.resolve()
