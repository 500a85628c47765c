"""`--resume` fills every hole of the evaluate stage (reliability review N018, N019, N035, rows 93-94): an errored
seed of a cell marked done, a cell that failed because every trial diverged (with `--retry-diverged` once the
cause is gone), a seed that never got a run and a seed added to `evaluate.seeds` afterwards. After it every planned
(cell, seed) has exactly one current `ok` run, the report's n equals the number of seeds, and only then the run
exits 0. A search cell whose stack one point's fault ended is searched again one point at a time. The faults come
from regularizers of a plugin, active while a flag file exists."""
from __future__ import annotations

import contextlib
import importlib
import io
import os
import re
import sys
from collections import Counter
from pathlib import Path

import pytest
import ray
import yaml
from fakes import local_ray_arguments, make_plugin
from ndebench.platform.cli.main import main
from ndebench.platform.engine.evaluatestage import rerun_reason
from ndebench.platform.record.completeness import attempts, current
from ndebench.platform.record.runs import evaluate_runs
from ndebench.platform.record.schema import SUPERSEDED, TAG
from ndebench.platform.record.tracking import client, run_status, search

PLUGIN = '''
import os

import torch
from ndebench.regularizers.base import Regularizer
from ndebench.regularizers.registry import HyperParam, register_regularizer


def _faulty():
    return os.path.exists(os.environ["NDEBENCH_TEST_HOLES"])


@register_regularizer("raise_on_seed1", summary="raises in seed 1's trial while $NDEBENCH_TEST_HOLES exists")
class RaiseOnSeed1(Regularizer):
    def draw(self, spec):
        return True

    def modulate(self, draw, t, z, out, role):
        if _faulty() and torch.initial_seed() == 1:
            raise ValueError("raise_on_seed1 raised")
        return out


@register_regularizer("raise_at_one", summary="raises at q = 1 while $NDEBENCH_TEST_HOLES exists",
                      hyperparams={"q": HyperParam((0.0, 1.0))})
class RaiseAtOne(Regularizer):
    def __init__(self, q=0.0):
        super().__init__()
        self.q = float(q)

    def draw(self, spec):
        return True

    def modulate(self, draw, t, z, out, role):
        if _faulty() and self.q == 1.0:
            raise ValueError("raise_at_one raised")
        return out


@register_regularizer("nan_drift", summary="a NaN drift while $NDEBENCH_TEST_HOLES exists")
class NanDrift(Regularizer):
    def draw(self, spec):
        return True

    def modulate(self, draw, t, z, out, role):
        return out * float("nan") if _faulty() and role == "drift" else out
'''
SPEC = {"study": "holes", "models": ["neural_cde"], "datasets": ["synthetic"],
        "regularizers": ["none", "raise_on_seed1", "nan_drift"], "model": {"hidden_size": 8},
        "training": {"epochs": 1, "min_epochs": 1, "patience": 1, "lr": 0.01}, "evaluate": {"seeds": [0, 1]},
        "report": {"figures": "none"}}
SEARCH = {"study": "search_holes", "protocol": "joint", "models": ["neural_cde"], "datasets": ["synthetic"],
          "regularizers": {"none": {}, "raise_at_one": {"q": [0.0, 1.0]}}, "model": {"hidden_size": 8},
          "training": {"epochs": 1, "min_epochs": 1, "patience": 1, "lr": 0.01}, "tune": {"sampler": "grid"},
          "evaluate": {"seeds": [0]}, "report": {"figures": "none"}}


def _run(args: list[str]) -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(args)
    return code, out.getvalue()


class _Run:
    """The fields of an MLflow run that :func:`rerun_reason` reads."""

    def __init__(self, status: str, config_hash: str = "h", commit: str = "c", start: int = 0):
        self.data = type("Data", (), {"tags": {f"{TAG}status": status, f"{TAG}config_hash": config_hash,
                                               f"{TAG}git_commit": commit}})()
        self.info = type("Info", (), {"status": "FINISHED", "start_time": start})()


def test_rerun_reasons():
    code = {"git_commit": "c"}
    assert rerun_reason([], "h", code, False) == "no run yet"
    assert rerun_reason([_Run("ok")], "h", code, False) is None
    assert rerun_reason([_Run("ok", "old")], "h", code, False) == "config changed since its ok run"
    assert rerun_reason([_Run("error")], "h", code, False) == "its last run ended error"
    assert rerun_reason([_Run("diverged")], "h", code, False) is None
    assert rerun_reason([_Run("diverged")], "h", code, True) == "diverged, --retry-diverged"
    assert rerun_reason([_Run("diverged", commit="old")], "h", code, False) == "diverged under other code"
    assert rerun_reason([_Run("ok"), _Run("error")], "h", code, False) is None  # an ok attempt counts
    assert rerun_reason([_Run("running")], "h", code, False).startswith("cut off")


@pytest.fixture
def faulty(tmp_path):
    """``faulty(spec)``: a one-CPU Ray whose workers load the plugin above, its faults on while the returned flag
    file exists, and the ``ndebench run`` arguments of ``spec`` written as a config in ``tmp_path``."""
    flag = tmp_path / "faulty.flag"
    flag.write_text("on")
    pythonpath = make_plugin(tmp_path / "plugin", PLUGIN, "ndebench_holesplugin")["PYTHONPATH"]
    sys.path.insert(0, str(tmp_path / "plugin"))
    importlib.invalidate_caches()
    os.environ["NDEBENCH_TEST_HOLES"] = str(flag)
    ray.init(**local_ray_arguments(
        1, runtime_env={"env_vars": {"NDEBENCH_TEST_HOLES": str(flag), "PYTHONPATH": pythonpath}}))

    def start(spec: dict) -> tuple[Path, list[str]]:
        config = tmp_path / f"{spec['study']}.yaml"
        config.write_text(yaml.safe_dump(spec))
        return flag, ["run", str(config), "--tracking-uri", f"sqlite:///{tmp_path / 'mlflow.db'}", "--storage-path",
                      str(tmp_path / "ray"), "--out", str(tmp_path / "reports")]

    try:
        yield start
    finally:
        ray.shutdown()
        sys.path.remove(str(tmp_path / "plugin"))
        os.environ.pop("NDEBENCH_TEST_HOLES", None)


@pytest.mark.system
def test_resume_fills_every_hole(tmp_path, faulty):
    flag, args = faulty(SPEC)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    code, out = _run(args)
    assert code == 1, out
    statuses = {key: run_status(current(runs)) for key, runs in attempts(uri, "holes").items()}
    cells = {c.split("__")[-1]: c for c, _ in statuses}
    # A cell's seeds train stacked (resources.stack, default 32): seed 1's exception ends seed 0 with it.
    assert statuses == {(cells["none"], 0): "ok", (cells["none"], 1): "ok",
                        (cells["raise_on_seed1"], 0): "error", (cells["raise_on_seed1"], 1): "error",
                        (cells["nan_drift"], 0): "diverged", (cells["nan_drift"], 1): "diverged"}
    assert out.strip().splitlines()[-1] == ("[ndebench] exit 1: 2 failed cell(s); 2 of 6 planned evaluate "
                                             "run(s) not ok (2 error) (`ndebench run ... --resume` reruns them)")
    # A seed that never got a run (its worker died before it opened one), then the fault is fixed.
    client(uri).delete_run(attempts(uri, "holes")[(cells["none"], 1)][0].info.run_id)
    flag.unlink()

    code, out = _run([*args, "--resume", "--retry-diverged", "--set", "evaluate.seeds=[0, 1, 2]"])
    assert code == 0, out
    assert "stage evaluate: 8 trial(s) over 3 cell(s), seeds [0, 1, 2], 1 already recorded" in out
    for line in ("rerun neural_cde x synthetic x none seed 1: no run yet",
                 "rerun neural_cde x synthetic x raise_on_seed1 seed 0: its last run ended error",
                 "stage evaluate: 2 trial(s) whose last run ended error or timeout train alone, not stacked",
                 "rerun neural_cde x synthetic x raise_on_seed1 seed 1: its last run ended error",
                 "rerun neural_cde x synthetic x nan_drift seed 0: diverged, --retry-diverged",
                 "rerun neural_cde x synthetic x none seed 2: no run yet"):
        assert line in out
    assert out.strip().splitlines()[-1] == "[ndebench] all 9 planned evaluate run(s) ok"  # none diverged
    found = attempts(uri, "holes")
    assert sorted(found) == sorted((cell, seed) for cell in cells.values() for seed in (0, 1, 2))
    assert all(run_status(current(runs)) == "ok" for runs in found.values())
    superseded = [r for runs in found.values() for r in runs if r.data.tags.get(SUPERSEDED)]
    assert Counter(run_status(r) for r in superseded) == {"error": 2, "diverged": 2}
    stacked = {key: current(runs).data.tags.get(f"{TAG}stack") for key, runs in found.items()}
    assert stacked[(cells["raise_on_seed1"], 0)] == stacked[(cells["raise_on_seed1"], 1)] == "1"
    assert (stacked[(cells["none"], 1)], stacked[(cells["nan_drift"], 0)]) == ("2", "3")
    frame = evaluate_runs(uri, "holes", with_calibration=False)
    assert len(frame) == 9 and set(frame.status) == {"ok"}
    assert "9 evaluate-phase runs: 9 ok, 0 diverged, 0 error." in out
    for regularizer in ("none", "raise_on_seed1", "nan_drift"):
        assert re.search(rf"\b{regularizer}\s+accuracy\s+3\s", out), out
    cell_runs = search(uri, "holes", f"tags.`{TAG}kind` = 'cell' and tags.`{TAG}phase` = 'evaluate'")
    assert {r.data.tags[f"{TAG}status"] for r in cell_runs} == {"done"}
    assert {r.data.metrics["n"] for r in cell_runs} == {3.0}

    code, out = _run([*args, "--resume", "--set", "evaluate.seeds=[0, 1, 2]"])
    assert code == 0 and "stage evaluate: 0 trial(s) over 0 cell(s), seeds [0, 1, 2], 9 already recorded" in out


@pytest.mark.system
def test_a_search_cell_a_stack_fault_failed_is_searched_again_point_by_point(tmp_path, faulty):
    """A search cell's grid points train stacked (resources.stack, default 32): the point q = 1 raises, which ends
    q = 0 with it, so the cell has no usable trial and fails. With the fault still there, `--resume` searches the
    cell again one point per Tune trial: q = 0 ends ok and is chosen, q = 1 errors alone, and the sweep exits 0."""
    _, args = faulty(SEARCH)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"

    def tuned() -> dict[str, list[tuple[str, str]]]:
        trials = search(uri, "search_holes", f"tags.`{TAG}kind` = 'trial' and tags.`{TAG}phase` = 'tune'")
        out: dict[str, list[tuple[str, str]]] = {}
        for r in sorted(trials, key=lambda r: r.info.start_time):
            out.setdefault(r.data.params["regularizer.q"], []).append(
                (r.data.tags[f"{TAG}status"], r.data.tags.get(f"{TAG}stack")))
        return out

    code, out = _run(args)
    assert code == 1, out
    assert tuned() == {"0.0": [("error", "2")], "1.0": [("error", "2")]}

    code, out = _run([*args, "--resume"])
    assert code == 0, out
    assert "1 failed cell(s) searched again one point per Tune trial, not stacked" in out
    assert tuned() == {"0.0": [("error", "2"), ("ok", "1")], "1.0": [("error", "2"), ("error", "1")]}
    cell = search(uri, "search_holes", f"tags.`{TAG}kind` = 'cell' and tags.`{TAG}phase` = 'tune'")
    assert [(r.data.tags[f"{TAG}status"], r.data.params.get("regularizer.q")) for r in cell] == [("done", "0.0")]
    assert out.strip().splitlines()[-1] == "[ndebench] all 2 planned evaluate run(s) ok"
