"""Stacked trials (``resources.stack``): every member ends exactly as its trial alone would on the CPU (the same
kernels on the same rows, the same generators), also when members stop early, diverge, resume from a checkpoint
or differ only in the regularizer's hyperparameters; a model that cannot be stacked trains its members one after
another, and says so."""
import dataclasses

import pytest
import torch
from fakes import poison_training_set
from ndebench.models.integrate import SolverConfig
from ndebench.platform.spec.config import TrainingConfig
from ndebench.platform.worker.build import build_trial
from ndebench.platform.worker.loop import run_trial
from ndebench.platform.worker.spec import TrialResult, TrialSpec
from ndebench.platform.worker.stack import cat_inputs, run_stack, unstackable
from ndebench.platform.worker.state import load_trial_state, save_trial_state

TRAINING = TrainingConfig(epochs=6, min_epochs=1, patience=1, lr=0.01, threads=1)


def _spec(seed: int, **kw) -> TrialSpec:
    base = dict(model="neural_cde", dataset="synthetic", regularizer="continuum_dropout",
                regularizer_params={"p": 0.3, "m": 10}, model_params={"hidden_size": 8}, training=TRAINING,
                solver=SolverConfig("euler", adjoint=False), seed=seed)
    base.update(kw)
    return TrialSpec(**base)


def _same(a: TrialResult, b: TrialResult) -> None:
    assert (a.status, a.epochs, a.best_epoch, a.message) == (b.status, b.epochs, b.best_epoch, b.message)
    assert a.val == b.val and a.test == b.test and a.protocol == b.protocol
    if a.weights is not None:
        assert all(torch.equal(a.weights[k], b.weights[k]) for k in a.weights)


def _strip(records):
    return [{k: v for k, v in r.items() if not k.endswith("_time_s")} for r in records]


@pytest.mark.parametrize("regularizer,params", [("continuum_dropout", {"p": 0.3, "m": 10}), ("none", {})])
def test_each_member_of_a_stack_ends_bit_for_bit_as_its_trial_alone(regularizer, params):
    specs = [_spec(seed, regularizer=regularizer, regularizer_params=params) for seed in (0, 1, 2)]
    alone_records, stacked_records = [[] for _ in specs], [[] for _ in specs]
    alone = [run_trial(s, on_epoch=r.append) for s, r in zip(specs, alone_records, strict=True)]
    notes = []
    stacked = run_stack(specs, on_epoch=[r.append for r in stacked_records], note=notes.append, exact=True)
    assert notes == []
    for a, b in zip(alone, stacked, strict=True):
        _same(a, b)
    assert [_strip(r) for r in stacked_records] == [_strip(r) for r in alone_records]
    print([r.epochs for r in alone])


def test_grid_points_of_a_tune_stage_stack_as_well():
    specs = [_spec(0, regularizer_params={"p": p, "m": m}, phase="tune", select="last_epoch")
             for p, m in ((0.1, 5), (0.3, 10), (0.5, 50))]
    stacked = run_stack(specs, evaluate_test=False, exact=True)
    for a, b in zip([run_trial(s, evaluate_test=False) for s in specs], stacked, strict=True):
        _same(a, b)
        assert b.test == {}


def test_a_diverging_member_leaves_the_stack_and_the_others_go_on(monkeypatch):
    poison_training_set(monkeypatch, seed=1)
    specs = [_spec(0), _spec(1), _spec(2)]
    alone = [run_trial(s) for s in specs]
    assert alone[1].status == "diverged" and alone[0].status == alone[2].status == "ok"
    for a, b in zip(alone, run_stack(specs, exact=True), strict=True):
        _same(a, b)


def test_a_stack_resumed_from_its_members_checkpoints_ends_as_an_uninterrupted_one(tmp_path):
    specs = [_spec(seed, training=dataclasses.replace(TRAINING, patience=3)) for seed in (4, 5)]
    folders = [tmp_path / str(s.seed) for s in specs]
    for folder in folders:
        folder.mkdir()

    def keep(folder):
        def hook(epoch, snapshot):
            if epoch == 2:
                save_trial_state(snapshot(), folder)
        return hook

    full = run_stack(specs, on_checkpoint=[keep(f) for f in folders])
    resumed = run_stack(specs, resume_states=[load_trial_state(f) for f in folders])
    for a, b in zip(full, resumed, strict=True):
        _same(a, b)


def test_batched_members_end_as_alone_up_to_the_summation_order_of_the_batched_products():
    """The default (batched) stack sums each member's matrix products in another order than its trial alone:
    float32 ulps per step. With early stopping out of play (min_epochs = epochs) nothing can flip a decision, and
    three epochs keep the drift far below 1e-4 relative in every smooth test metric."""
    fixed = dataclasses.replace(TRAINING, epochs=3, min_epochs=3)
    specs = [_spec(seed, training=fixed) for seed in (0, 1, 2)]
    for a, b in zip([run_trial(s) for s in specs], run_stack(specs), strict=True):
        assert (a.status, a.epochs) == (b.status, b.epochs) == ("ok", 3)
        smooth = {k: v for k, v in a.test.items() if k != "test_ece"}
        assert {k: b.test[k] for k in smooth} == pytest.approx(smooth, rel=1e-4, abs=1e-6)


def test_a_stack_that_runs_out_of_time_ends_every_member_with_timeout():
    results = run_stack([_spec(0), _spec(1)], timeout_s=0.0)
    assert [r.status for r in results] == ["timeout", "timeout"]
    assert all("in epoch" in r.message for r in results)


SGD = dataclasses.replace(TRAINING, epochs=2, min_epochs=2, optimizer="sgd")


@pytest.mark.parametrize("model", ["neural_sde", "neural_lsde", "neural_lnsde", "neural_gsde", "ode_rnn", "ancde"])
def test_every_time_series_model_stacks_and_its_members_end_as_alone_up_to_the_batched_products(model):
    """Each SDE member's Brownian increments are its trial's alone (its own torchsde Brownian motion, asked for
    the same steps), ODE-RNN's GRU cell and the SDEs' scalar ``theta`` are held per member, ANCDE's product with
    its attention layer's weight is member k's own. SGD: Adam's step divides by the gradient's running scale, so
    a component whose gradient is a few ulps turns an ulp of the batched products into a step of its own size
    (with Adam the SDEs' test NLL moves by up to 1.3e-4 relative over 2 epochs; with SGD by 2e-8)."""
    specs = [_spec(seed, model=model, training=SGD) for seed in (0, 1)]
    notes = []
    for a, b in zip([run_trial(s) for s in specs], run_stack(specs, note=notes.append), strict=True):
        assert (a.status, a.epochs, a.best_epoch) == (b.status, b.epochs, b.best_epoch) == ("ok", 2, a.best_epoch)
        smooth = {k: v for k, v in a.test.items() if k != "test_ece"}
        assert {k: b.test[k] for k in smooth} == pytest.approx(smooth, rel=1e-4, abs=1e-6)
    assert notes == []


def test_an_exact_stack_of_sdes_draws_each_member_s_own_noise():
    # Exact arithmetic leaves rounding as the only difference: the scalar theta's gradient sums a member's rows in
    # another order than alone (an ulp), which Adam's step blew up to 3e-5 relative; with SGD the metrics are equal.
    # Each member's increments are its trial's own bit for bit (test_grid_brownian.py): on this small synthetic set
    # the diffusion is too small for another path to move the NLL measurably.
    specs = [_spec(seed, model="neural_lnsde", training=SGD) for seed in (0, 1)]
    for a, b in zip([run_trial(s) for s in specs], run_stack(specs, exact=True), strict=True):
        assert (a.status, a.epochs, a.best_epoch) == (b.status, b.epochs, b.best_epoch)
        assert b.test["test_nll"] == pytest.approx(a.test["test_nll"], rel=1e-6)
        assert b.val["val_nll"] == pytest.approx(a.val["val_nll"], rel=1e-6)


def test_which_models_stack(monkeypatch):
    for model in ("neural_cde", "ode_rnn", "ancde", "neural_lnsde"):
        assert unstackable(build_trial(_spec(0, model=model)).model) is None, model
    sde = build_trial(_spec(0, model="neural_sde")).model
    # a trial alone that captures its solve on a GPU draws its increments from a device generator, one tensor
    monkeypatch.setattr(type(sde), "graph_note", lambda self, device: "captured")
    assert "captured solve" in unstackable(sde)


@pytest.mark.parametrize("model", ["gru_ode", "neural_ode"])
def test_other_stackable_models_end_as_alone_up_to_elementwise_rounding(model):
    """Bit-identity needs every elementwise kernel to round each element alike; torch's vectorised sigmoid and
    tanh take a scalar path for the tail of a tensor, so an element can round one ulp apart when the tensor's
    length changes (K * B rows against B). Two epochs leave such ulps far below 1e-4 relative. The ECE is left
    out: it jumps when a probability crosses a bin edge (near-uniform predictions sit at 1/3 = 5/15)."""
    specs = [_spec(seed, model=model, training=dataclasses.replace(TRAINING, epochs=2)) for seed in (0, 1)]
    notes = []
    for a, b in zip([run_trial(s) for s in specs], run_stack(specs, note=notes.append, exact=True), strict=True):
        assert (a.status, a.epochs, a.best_epoch) == (b.status, b.epochs, b.best_epoch)
        smooth = {k: v for k, v in a.test.items() if k != "test_ece"}
        assert {k: b.test[k] for k in smooth} == pytest.approx(smooth, rel=1e-4, abs=1e-6)
    assert notes == []


def test_inputs_concatenate_member_major():
    a, b = torch.zeros(2, 3), torch.ones(2, 3)
    assert torch.equal(cat_inputs([a, b]), torch.cat([a, b]))
    pair = cat_inputs([(a, a[:, :1]), (b, b[:, :1])])
    assert torch.equal(pair[0], torch.cat([a, b])) and pair[1].shape == (4, 1)


def test_a_stack_needs_one_hook_per_member():
    with pytest.raises(ValueError, match="2 specs need 2"):
        run_stack([_spec(0), _spec(1)], on_epoch=[None])


def test_a_resumed_member_finds_its_own_folder_in_a_stack_s_checkpoints(tmp_path):
    """After the driver died, an unfinished member run names the stack's trial folder; its state is the one in
    ``checkpoint_*/member-<its config hash>/``, the newest first, and a plain trial's checkpoint still loads."""
    from ndebench.platform.cluster.storage import Storage
    from ndebench.platform.engine.trainable import _resume_state, member_folder
    from ndebench.platform.record.schema import TAG

    trial = tmp_path / "root" / "study" / "evaluate-1" / "trial_a"
    for epoch in (1, 2):
        for identity in ("aaa", "bbb"):
            folder = trial / f"checkpoint_00000{epoch}" / member_folder(identity)
            folder.mkdir(parents=True)
            save_trial_state({"epoch": epoch, "who": identity}, folder)
    tags = {f"{TAG}trial_dir": "study/evaluate-1/trial_a", f"{TAG}config_hash": "bbb"}
    state, note = _resume_state(Storage(tmp_path / "root"), "study", tags)
    assert state == {"epoch": 2, "who": "bbb"} and note == ""
    (trial / "checkpoint_000003").mkdir()
    save_trial_state({"epoch": 3, "who": "alone"}, trial / "checkpoint_000003")
    assert _resume_state(Storage(tmp_path / "root"), "study", tags)[0] == {"epoch": 3, "who": "alone"}


BUILTIN_REGULARIZERS = ("none", "continuum_dropout", "naive_dropout_drift", "naive_dropout_head", "jump_diffusion",
                        "jump_diffusion_ttn", "steer", "tabn")


@pytest.mark.parametrize("regularizer", BUILTIN_REGULARIZERS)
def test_every_regularizer_stacks_as_its_trials_alone_or_falls_back_and_says_why(regularizer):
    """Members that differ in the regularizer's value (a tune stage's grid points) on a model that stacks: each ends
    exactly as its trial alone, or the stack trains them one after another with a note naming the regularizer's
    ``stack_blocker`` (STEER's members end their passes at different times; naive drift dropout's and TA-BN's
    layers sit in each member's own field), never an error."""
    from ndebench.regularizers.catalog import BUILTINS

    values = {name: h.choices for name, h in BUILTINS[regularizer].hyperparams.items() if len(h.choices) > 1}
    points = [{name: choices[i] for name, choices in values.items()} for i in (0, 1)]
    short = dataclasses.replace(TRAINING, epochs=2)
    specs = [_spec(seed, model="neural_ode", regularizer=regularizer, regularizer_params=params, training=short)
             for seed, params in zip((0, 1), points, strict=True)]
    notes = []
    stacked = run_stack(specs, note=notes.append)
    blocker = build_trial(specs[0]).model.regularizer.stack_blocker
    assert notes == ([] if blocker is None else [notes[0]])
    assert blocker is None or blocker in notes[0]
    assert [r.status for r in stacked] == ["ok", "ok"]
    for a, b in zip([run_trial(s) for s in specs], stacked, strict=True):
        _same(a, b)
