"""Stacking by default (``resources.stack`` 32): a stacked member stops at the epoch its trial alone stops at and
ends with its metrics, early stopping in play, and a stack asked to train as one region too; every decision reads
validation values at ``DECISION_DIGITS`` significant digits (docs/protocol.md)."""
import dataclasses

import pytest
import torch
from ndebench.models.integrate import SolverConfig
from ndebench.platform.common.metrics import DECISION_DIGITS, decisive
from ndebench.platform.spec.plan import pick_best
from ndebench.platform.spec.sweepspec import DEFAULT_STACK, Resources
from ndebench.platform.worker import stackgraph
from ndebench.platform.worker.loop import run_trial
from ndebench.platform.worker.stack import run_stack
from scipy import stats
from test_stack import TRAINING, _spec

# The stated tolerance of a stacked member's metrics against its trial alone (docs/protocol.md): the decisions'
# rounding step at 5 significant digits.
RTOL = 10.0 ** (1 - DECISION_DIGITS)
EARLY = dataclasses.replace(TRAINING, epochs=12, min_epochs=2, patience=1, lr=0.02)
DEFAULT_SOLVER = SolverConfig("euler", adjoint=False)  # cuda_graph auto
REGION = SolverConfig("euler", adjoint=False, cuda_graph="stack")


def test_stacking_is_on_by_default_with_a_size_from_the_config():
    assert Resources().stack == DEFAULT_STACK == 32 and Resources(stack=1).stack == 1
    assert DEFAULT_SOLVER.cuda_graph == "auto"


@pytest.mark.parametrize("solver", [DEFAULT_SOLVER, REGION], ids=["default", "region"])
@pytest.mark.parametrize("regularizer,params", [("continuum_dropout", {"p": 0.3, "m": 10}), ("none", {})])
def test_a_stack_s_members_stop_where_they_stop_alone_with_their_metrics(monkeypatch, regularizer, params, solver):
    epochs = []
    region_epoch = stackgraph.train_epoch
    monkeypatch.setattr(stackgraph, "train_epoch", lambda region: epochs.append(len(region.members))
                        or region_epoch(region))
    specs = [_spec(seed, regularizer=regularizer, regularizer_params=params, training=EARLY, solver=solver)
             for seed in range(5)]
    alone = [run_trial(s) for s in specs]
    notes, widths = [], []
    stacked = run_stack(specs, note=notes.append, widths=widths)
    assert notes == [] and epochs == (widths if solver is REGION else []) and widths[0] == 5
    assert len({r.epochs for r in alone}) > 1, "the members stop at different epochs: early stopping is in play"
    assert widths == [sum(r.epochs >= e for r in alone) for e in range(1, max(r.epochs for r in alone) + 1)]
    for a, b in zip(alone, stacked, strict=True):
        assert (b.status, b.epochs, b.best_epoch) == (a.status, a.epochs, a.best_epoch)
        assert b.val["val_accuracy"] == a.val["val_accuracy"] and b.test["test_accuracy"] == a.test["test_accuracy"]
        for key in ("val_loss", "val_nll"):
            assert b.val[key] == pytest.approx(a.val[key], rel=RTOL)
        assert b.test["test_nll"] == pytest.approx(a.test["test_nll"], rel=RTOL)


def test_the_verdict_between_two_stacked_cells_is_the_verdict_between_them_alone():
    """The paired t-test (the paper protocol's) between Continuum Dropout and none over 5 seeds, each cell stacked
    and alone: the same p-value to the tolerance, hence the same verdict at any level."""
    cells = {reg: [_spec(seed, regularizer=reg, regularizer_params=params, training=EARLY, solver=DEFAULT_SOLVER)
                   for seed in range(5)] for reg, params in (("continuum_dropout", {"p": 0.3, "m": 10}), ("none", {}))}
    nll = {(reg, how): [r.test["test_nll"] for r in (run_stack(specs) if how else [run_trial(s) for s in specs])]
           for reg, specs in cells.items() for how in (True, False)}
    p = {how: stats.ttest_rel(nll["continuum_dropout", how], nll["none", how]).pvalue for how in (True, False)}
    assert p[True] == pytest.approx(p[False], rel=1e-3)


def test_a_decision_reads_five_significant_digits():
    assert decisive(0.123456789) == 0.12346 and decisive(12345.678) == 12346.0 and decisive(-1.000004) == -1.0
    assert decisive(float("inf")) == float("inf") and decisive(0.0) == 0.0
    # Two values a few float32 ulps apart take the same decision; a tie goes to the values that sort first.
    close = float(torch.tensor(0.7312345, dtype=torch.float32).nextafter(torch.tensor(1.0)))
    assert pick_best([({"p": 0.3}, close), ({"p": 0.1}, 0.7312345)], "min") == {"p": 0.1}
    assert pick_best([({"p": 0.3}, 0.73122), ({"p": 0.1}, 0.73124)], "min") == {"p": 0.3}


def test_an_improvement_below_the_fifth_digit_is_no_improvement():
    from ndebench.platform.worker.build import build_trial
    from ndebench.platform.worker.loop import Training

    spec = _spec(0, training=dataclasses.replace(TRAINING, min_epochs=0, patience=0))
    training = Training(build_trial(spec), spec.training, 0)
    training.epoch = 1
    training.end_epoch({"nll": 0.5, "accuracy": 0.5})
    training.epoch = 2
    training.end_epoch({"nll": 0.5 * (1 - 1e-7), "accuracy": 0.6})
    assert training.best.epoch == 1 and training.stop
