"""No trial runs forever: ``tune.trial_timeout_s`` ends a trial with status ``timeout`` between two mini-batches,
and ``solver.max_steps`` makes an adaptive solve that would not end fail with a message naming the key."""
from __future__ import annotations

import copy
import subprocess
import sys
import time

import ndebench.platform.worker.loop as loop_module
import pytest
import torch
import yaml
from fakes import make_plugin
from ndebench.models.integrate import SolverConfig, StepLimitError, TrialRNG, integrate, step_limit
from ndebench.platform.record.completeness import not_ok_summary
from ndebench.platform.record.schema import TAG
from ndebench.platform.record.tracking import search
from ndebench.platform.spec.config import ConfigError, TrainingConfig, parse_spec
from ndebench.platform.worker.loop import run_trial
from ndebench.platform.worker.spec import TrialSpec
from torch import nn

TRAINING = TrainingConfig(epochs=3, min_epochs=3, patience=3, lr=0.01, threads=1)
TINY = {"study": "t", "models": ["neural_cde"], "datasets": ["synthetic"], "regularizers": ["none"]}


def _spec(**kw) -> TrialSpec:
    return TrialSpec(**{"model": "neural_cde", "dataset": "synthetic", "regularizer": "none",
                        "model_params": {"hidden_size": 8}, "training": TRAINING, "solver": SolverConfig("euler"),
                        **kw})


def test_the_deadline_cuts_a_long_epoch_between_batches(monkeypatch):
    """An epoch of three 3 s batches under a 4 s limit is cut before its third batch, not at its end. The limit
    counts from the trial's start, before its data is loaded (the first load in a process imports scikit-learn):
    whatever that took below 4 s, the first batch runs and no third one does."""
    batches = []
    loss = loop_module.trial_loss

    def slow_loss(*args):
        batches.append(time.monotonic())
        time.sleep(3)
        return loss(*args)

    monkeypatch.setattr(loop_module, "trial_loss", slow_loss)
    epochs: list[dict] = []
    result = run_trial(_spec(), timeout_s=4, on_epoch=epochs.append)
    assert result.status == "timeout" and result.epochs == 1 and not epochs
    assert result.message.startswith("exceeded tune.trial_timeout_s=4 (") and result.message.endswith(
        " s since the trial started or resumed), in epoch 1")
    assert result.test == {} and result.weights is None and result.calibration is None
    assert 1 <= len(batches) <= 2  # the synthetic training split has 3 batches an epoch


def test_a_trial_within_its_limit_is_unchanged():
    assert run_trial(_spec(), timeout_s=600).test == run_trial(_spec()).test


def test_the_deadline_counts_from_a_resumed_trials_restart():
    """Resumed from epoch 2 after more than its limit has passed since the first start, a trial still
    finishes: its limit counts from the restart (as a retried Ray trial's does)."""
    snapshots = {}
    started = time.monotonic()
    whole = run_trial(_spec(), on_checkpoint=lambda epoch, snapshot: snapshots.setdefault(
        epoch, copy.deepcopy(snapshot())))
    limit = 2 * (time.monotonic() - started)
    time.sleep(limit)
    resumed = run_trial(_spec(), resume_state=snapshots[2], timeout_s=limit)
    assert time.monotonic() - started > limit
    assert resumed.status == "ok" and resumed.test == whole.test


@pytest.mark.parametrize("value,needle", [
    (0, "tune.trial_timeout_s=0 must be null or a finite number > 0"),
    ("1h", "tune.trial_timeout_s='1h' must be null or a finite number > 0"),
])
def test_trial_timeout_s_is_a_positive_number(value, needle):
    assert parse_spec({**TINY, "tune": {"trial_timeout_s": 90}}).tune.trial_timeout_s == 90
    assert parse_spec(TINY).tune.trial_timeout_s is None
    with pytest.raises(ConfigError, match=needle):
        parse_spec({**TINY, "tune": {"trial_timeout_s": value}})


def test_max_steps_is_checked_and_only_for_adaptive_methods():
    spec = parse_spec({**TINY, "solver": {"method": "dopri5", "max_steps": 500}})
    assert spec.solver["default"].max_steps == 500
    assert spec.base_config("neural_cde", "synthetic", "none")["solver.max_steps"] == 500
    # unset, it stays out of the trial config (and so out of its hash)
    assert "solver.max_steps" not in parse_spec({**TINY, "solver": {"method": "dopri5"}}).base_config(
        "neural_cde", "synthetic", "none")
    with pytest.raises(ConfigError, match="solver.max_steps=0 must be null or an integer >= 1"):
        parse_spec({**TINY, "solver": {"method": "dopri5", "max_steps": 0}})
    with pytest.raises(ConfigError, match="solver.max_steps=50: a step cap applies to the adaptive methods "
                                          r"\(dopri5, dopri8, bosh3, fehlberg2, adaptive_heun\) only; method "
                                          "'rk4' takes a fixed number of steps"):
        parse_spec({**TINY, "solver": {"method": "rk4", "max_steps": 50}})


def test_a_tiny_step_cap_fails_an_adaptive_trial_with_the_key_named():
    solver = SolverConfig("dopri5", rtol=1e-9, atol=1e-9, max_steps=1)
    with pytest.raises(StepLimitError, match=r"the dopri5 forward solve reached solver.max_steps=1 steps between "
                                             "two output times"):
        run_trial(_spec(solver=solver))
    assert run_trial(_spec(solver=SolverConfig("dopri5", max_steps=10_000))).status == "ok"


class _Wavy(nn.Module):
    def __init__(self):
        super().__init__()
        self.k = nn.Parameter(torch.tensor(1.0))

    def forward(self, t, z):
        return -self.k * z * torch.cos(20 * t)


def test_the_cap_bounds_the_adjoint_backward_solves_too(monkeypatch):
    """torchdiffeq copies ``max_num_steps`` to the adjoint's backward solve: a cap the forward solve just meets
    stops the (larger) backward one, and ``run_trial`` names the key for it too."""
    solver = SolverConfig("dopri5", adjoint=True, rtol=1e-7, atol=1e-9, max_steps=37)
    out = integrate(_Wavy(), torch.ones(2, 3), torch.linspace(0, 1, 2), solver=solver, rng=TrialRNG.from_seed(0))
    with pytest.raises(AssertionError, match="max_num_steps exceeded") as raised:
        out.sum().backward()
    assert "solver.max_steps=37" in str(step_limit(raised.value, solver, "adjoint backward"))
    assert step_limit(AssertionError("something else"), solver, "forward") is None

    def backward_fails(self):
        raise raised.value

    monkeypatch.setattr(loop_module.Training, "train_epoch", backward_fails)
    with pytest.raises(StepLimitError, match="dopri5 adjoint backward solve reached solver.max_steps=37"):
        run_trial(_spec(solver=solver))


def test_an_evaluate_seed_that_timed_out_counts_as_not_ok():
    assert not_ok_summary({("c", 0): "ok", ("c", 1): "timeout"}) == "1 of 2 planned evaluate run(s) not ok (1 timeout)"


SLOW_PLUGIN = '''
import time

from ndebench.regularizers import checks
from ndebench.regularizers.none import NoRegularizer
from ndebench.regularizers.registry import HyperParam, register_regularizer


@register_regularizer("slow_none", summary="no regularization; each training batch waits delay_s seconds",
                      hyperparams={"delay_s": HyperParam((0.0,), checks.non_negative)})
class SlowNone(NoRegularizer):
    def __init__(self, delay_s=0.0):
        super().__init__()
        self.delay_s = float(delay_s)

    def penalty(self):
        time.sleep(self.delay_s)
        return super().penalty()
'''
# The slow grid point's first batch outlasts the limit, which is checked before the next one; the limit leaves
# the other trials (a second or two each) a margin of seven times on a loaded machine. One trial at a time
# (stack 1): in a stack the limit bounds the whole stack, so both grid points would time out together.
SWEEP = {
    "study": "slow", "protocol": "joint", "models": ["neural_cde"], "datasets": ["synthetic"],
    "regularizers": {"none": {}, "slow_none": {"delay_s": [0.0, 16.0]}}, "model": {"hidden_size": 8},
    "training": {"epochs": 2, "min_epochs": 2, "patience": 2, "lr": 0.01},
    "tune": {"sampler": "grid", "trial_timeout_s": 15}, "evaluate": {"seeds": [0]},
    "resources": {"system_metrics": False, "stack": 1}, "report": {"figures": "none"},
}


@pytest.mark.system
@pytest.mark.usefixtures("one_cpu_ray")
def test_a_trial_over_its_limit_ends_timeout_and_the_stage_goes_on(tmp_path):
    """A real sweep on a one-CPU Ray (its trials one after another on one worker): of a cell's two grid points, the
    slow one times out (run FAILED, tagged ``timeout`` with the limit named); the cell chooses the other, and both
    cells are evaluated: exit 0."""
    env = make_plugin(tmp_path / "site", SLOW_PLUGIN, module="ndebench_slowplugin")
    (tmp_path / "slow.yaml").write_text(yaml.safe_dump(SWEEP))
    run = subprocess.run([sys.executable, "-m", "ndebench.platform", "run", "slow.yaml"], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    runs = search(f"sqlite:///{tmp_path / 'mlflow.db'}", "slow")
    trials = [r for r in runs if r.data.tags.get(f"{TAG}kind") == "trial"]
    tuned = {r.data.params["regularizer.delay_s"]: r for r in trials if r.data.tags[f"{TAG}phase"] == "tune"}
    assert set(tuned) == {"0.0", "16.0"}
    slow = tuned["16.0"]
    assert slow.data.tags[f"{TAG}status"] == "timeout" and slow.info.status == "FAILED"
    assert slow.data.tags[f"{TAG}message"].startswith("exceeded tune.trial_timeout_s=15 (")
    assert tuned["0.0"].data.tags[f"{TAG}status"] == "ok"
    cell = next(r for r in runs if r.data.tags.get(f"{TAG}kind") == "cell" and r.data.tags[f"{TAG}phase"] == "tune"
                and r.data.tags[f"{TAG}regularizer"] == "slow_none")
    assert cell.data.tags[f"{TAG}status"] == "done" and cell.data.params["regularizer.delay_s"] == "0.0"
    evaluated = {r.data.tags[f"{TAG}regularizer"]: r.data.tags[f"{TAG}status"]
                 for r in trials if r.data.tags[f"{TAG}phase"] == "evaluate"}
    assert evaluated == {"none": "ok", "slow_none": "ok"}
