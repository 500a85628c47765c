"""`resources.stack` end to end on a local Ray: the same sweep stacked and not records one ``ok`` tune run per grid
point and one ``ok`` evaluate run per (cell, seed) each (the variant cells of a regularizer stacked with its tuned
cell), with the same tags, params, chosen point and, within the batched products' rounding, the same validation and
test metrics.

Tolerance: a stacked member sums its matrix products in another order than its trial alone (float32 ulps per
step, see ``run_stack``); with early stopping out of play (``min_epochs = epochs``) two epochs keep the drift far
below 1e-4 relative in every smooth metric (tests/test_stack.py measures the same on the worker alone). The ECE
is left out: it jumps when a probability crosses a bin edge."""
import contextlib
import io
import socket
import tempfile
from pathlib import Path

import pytest
import yaml
from fakes import local_ray_arguments
from ndebench.platform.cli.main import main
from ndebench.platform.failures.leftovers import CHECKPOINT
from ndebench.platform.record.runs import fixed_values, parse_param
from ndebench.platform.record.tracking import TAG, client, search
from ndebench.platform.worker.spec import TrialSpec
from ndebench.platform.worker.stack import run_stack

pytestmark = pytest.mark.system
SEEDS = [0, 1, 2]


def _spec(study: str, stack: int) -> dict:
    return {
        "study": study, "protocol": "joint", "models": ["neural_cde"], "datasets": ["synthetic"],
        "regularizers": {"none": {}, "continuum_dropout": {"p": [0.1, 0.3], "m": [5, 10]}},
        "model": {"hidden_size": 8},
        "training": {"epochs": 2, "min_epochs": 2, "patience": 1, "lr": 0.01, "threads": 1},
        "solver": {"method": "euler", "adjoint": False},
        "tune": {"sampler": "grid", "seed": 0},
        "variants": {"continuum_dropout": "grid"},
        "evaluate": {"seeds": SEEDS, "save_weights": False},
        "resources": {"cpu": 1, "stack": stack, "system_metrics": False},
        "report": {"figures": "none"},
    }


@pytest.fixture(scope="module")
def sweeps(tmp_path_factory):
    import ray

    root = tmp_path_factory.mktemp("stack")
    uri = f"sqlite:///{root / 'mlflow.db'}"
    ray.init(**local_ray_arguments(1))
    try:
        codes = {}
        for study, stack in (("alone", 1), ("stacked", 3)):
            config = root / f"{study}.yaml"
            config.write_text(yaml.safe_dump(_spec(study, stack)))
            with contextlib.redirect_stdout(io.StringIO()):
                codes[study] = main(["run", str(config), "--tracking-uri", uri, "--storage-path",
                                     (root / "ray").as_uri(), "--out", str(root / study)])
        yield uri, codes
    finally:
        ray.shutdown()


def _evaluate_runs(uri: str, study: str) -> dict[tuple[str, int], object]:
    runs = [r for r in search(uri, study) if r.data.tags.get(f"{TAG}kind") == "trial"
            and r.data.tags.get(f"{TAG}phase") == "evaluate"]
    keyed = {(r.data.tags[f"{TAG}cell"], int(r.data.tags[f"{TAG}seed"])): r for r in runs}
    assert len(keyed) == len(runs), "one evaluate run per (cell, seed)"
    return keyed


def test_a_stacked_sweep_records_one_ok_run_per_cell_and_seed_with_the_same_test_metrics(sweeps):
    uri, codes = sweeps
    assert codes == {"alone": 0, "stacked": 0}
    alone, stacked = _evaluate_runs(uri, "alone"), _evaluate_runs(uri, "stacked")
    cells = ["none", "continuum_dropout"] + [f"continuum_dropout[p={p},m={m}]" for p in (0.1, 0.3) for m in (5, 10)]
    assert sorted(stacked) == sorted(alone) == sorted((f"neural_cde__synthetic__{c}", s) for c in cells for s in SEEDS)
    variant_cells = [r for r in search(uri, "stacked") if r.data.tags.get(f"{TAG}kind") == "cell"
                     and r.data.tags.get(f"{TAG}phase") == "evaluate" and r.data.tags.get(f"{TAG}variant")]
    assert len(variant_cells) == 4 and all("fixed" in r.data.params for r in variant_cells)
    folders: dict[str, set[str]] = {}
    for (cell, _), run in stacked.items():
        folders.setdefault(run.data.tags[f"{TAG}trial_dir"], set()).add(cell)
    assert any(len(members) > 1 for members in folders.values()), "variants stack with their regularizer's cell"
    for key, run in stacked.items():
        other = alone[key]
        assert run.data.tags[f"{TAG}status"] == other.data.tags[f"{TAG}status"] == "ok"
        assert run.data.params == other.data.params | {"study": "stacked"}
        assert {k for k in run.data.tags if k.startswith(TAG)} == {k for k in other.data.tags if k.startswith(TAG)}
        assert run.data.tags[f"{TAG}epochs"] == other.data.tags[f"{TAG}epochs"] == "2"
        if variant := run.data.tags.get(f"{TAG}variant"):
            # A run recorded before the `fixed` param is named alike from its own recorded values.
            legacy = {k: v for k, v in run.data.params.items() if k != "fixed"}
            assert fixed_values(legacy, "continuum_dropout", variant) == parse_param(run.data.params["fixed"])
        assert (run.data.tags[f"{TAG}stack"], other.data.tags[f"{TAG}stack"]) == ("3", "1")  # stacks of 3: 15 + 3
        expected = {k: v for k, v in other.data.metrics.items() if k.startswith("test_") and k != "test_ece"}
        assert expected and {k: run.data.metrics[k] for k in expected} == pytest.approx(expected, rel=1e-4, abs=1e-6)


def _tune_runs(uri: str, study: str) -> dict[tuple[str, str], object]:
    runs = [r for r in search(uri, study) if r.data.tags.get(f"{TAG}kind") == "trial"
            and r.data.tags.get(f"{TAG}phase") == "tune"]
    keyed = {(r.data.params["regularizer.p"], r.data.params["regularizer.m"]): r for r in runs}
    assert len(keyed) == len(runs), "one tune run per grid point"
    return keyed


def test_a_stacked_tune_stage_records_one_run_per_grid_point_with_the_same_metrics_and_choice(sweeps):
    """The 2 x 2 grid in stacks of 3 and 1 (one Tune trial each) against four trials alone: the same four runs, the
    same validation metrics within the batched products' rounding (see the module docstring), the same choice on
    the cell run."""
    uri, codes = sweeps
    assert codes == {"alone": 0, "stacked": 0}
    alone, stacked = _tune_runs(uri, "alone"), _tune_runs(uri, "stacked")
    assert sorted(stacked) == sorted(alone) == sorted((p, m) for p in ("0.1", "0.3") for m in ("5", "10"))
    for point, run in stacked.items():
        other = alone[point]
        assert run.data.tags[f"{TAG}status"] == other.data.tags[f"{TAG}status"] == "ok"
        assert run.data.params == other.data.params | {"study": "stacked"}
        assert run.data.tags[f"{TAG}epochs"] == other.data.tags[f"{TAG}epochs"] == "2"
        steps = [sorted(m.step for m in client(uri).get_metric_history(r.info.run_id, "val_loss"))
                 for r in (run, other)]
        assert steps[0] == steps[1] == [1, 2]  # one point per epoch: the selected epoch's is result_val_loss
        expected = {k: v for k, v in other.data.metrics.items() if "val_" in k and not k.endswith("val_ece")}
        assert expected and {k: run.data.metrics[k] for k in expected} == pytest.approx(expected, rel=1e-4, abs=1e-6)
    assert len({r.data.tags[f"{TAG}trial_dir"] for r in stacked.values()}) == 2  # two Tune trials: 3 + 1
    cells = {s: [r for r in search(uri, s) if r.data.tags.get(f"{TAG}kind") == "cell"
                 and r.data.tags.get(f"{TAG}phase") == "tune" and "regularizer.p" in r.data.params]
             for s in ("alone", "stacked")}
    assert [c.data.params for c in cells["stacked"]] == [c.data.params for c in cells["alone"]] and cells["alone"]


def _staging_left(pids: list[int]) -> list[Path]:
    """The checkpoint staging folders of these (killed) processes still on disk: a stack stages its members'
    checkpoints in one folder for its whole run, so a killed stack worker always had one."""
    return [path for pid in pids
            for path in Path(tempfile.gettempdir()).glob(f"ndebench-{CHECKPOINT}-{socket.gethostname()}-{pid}-*")]


def test_a_killed_stack_resumes_every_member_from_its_checkpoint_in_tune_and_in_evaluate(tmp_path, uri):
    """SIGKILL of the tune stack's worker after 5 of 12 epochs of its two grid points, then of the evaluate stack's
    worker after 5 of 12 epochs of its two seeds: Ray retries each stack from its checkpoint (one folder per member)
    into the same two MLflow runs; every epoch is logged once per run, and each point's validation values and each
    seed's test metrics equal an uninterrupted stack's (the same batched arithmetic, hence exactly)."""
    from test_faults import RESUMED, _run_killing_workers

    config = dict(RESUMED, study="stackkill", regularizers={"continuum_dropout": {"p": [0.1, 0.3], "m": [10]}},
                  tune={"sampler": "grid"}, evaluate={"seeds": [0, 1]}, resources={"cpu": 1, "stack": 2})
    (tmp_path / "stackkill.yaml").write_text(yaml.safe_dump(config))
    returncode, output, killed = _run_killing_workers(tmp_path, "stackkill.yaml", [("tune", 10), ("evaluate", 10)],
                                                      every_attempt=False, seconds=600)
    assert len(killed) == 2
    assert returncode == 0, output
    assert _staging_left(killed) == []

    def trials(phase: str, key) -> list:
        runs = search(uri, "stackkill", f"tags.`{TAG}phase` = '{phase}' and tags.`{TAG}kind` = 'trial'")
        for run in runs:
            assert run.data.tags[f"{TAG}status"] == "ok" and run.info.status == "FINISHED"
            steps = sorted(m.step for m in client(uri).get_metric_history(run.info.run_id, "train_loss") if m.step)
            assert steps == list(range(1, 13))
        return sorted(runs, key=key)

    def specs(runs: list) -> list[TrialSpec]:
        return [TrialSpec.from_flat({k: parse_param(v) for k, v in r.data.params.items()}) for r in runs]

    tune = trials("tune", lambda r: float(r.data.params["regularizer.p"]))
    assert [r.data.params["regularizer.p"] for r in tune] == ["0.1", "0.3"]
    for run, result in zip(tune, run_stack(specs(tune), evaluate_test=False), strict=True):
        assert {f"result_{k}": v for k, v in result.val.items()} == {
            k: v for k, v in run.data.metrics.items() if k.startswith("result_")}
    evaluated = trials("evaluate", lambda r: int(r.data.tags[f"{TAG}seed"]))
    assert [int(r.data.tags[f"{TAG}seed"]) for r in evaluated] == [0, 1]
    for run, result in zip(evaluated, run_stack(specs(evaluated)), strict=True):
        assert result.test == {k: v for k, v in run.data.metrics.items() if k.startswith("test_")}
