"""A stack trained as one region (``solver.cuda_graph: stack``), the parts a CPU can check: the region runs
eagerly here, and each member ends as its trial alone up to float32 reduction order; the stacked optimizer
step is each member's own (float64, to 1e-12) and leaves a masked member bit for bit as it was; the whole
training step passes the host-synchronisation guard; members of a model the region cannot hold fall back to
the batched eager stack and say why. The capture itself is checked on a GPU (``test_gpu.py``)."""
import dataclasses

import pytest
import torch
from fakes import poison_training_set
from ndebench.models.base import repeat_batch
from ndebench.models.graphs import host_sync_guard
from ndebench.models.integrate import SolverConfig
from ndebench.platform.failures.deadline import Deadline
from ndebench.platform.worker.loop import run_trial
from ndebench.platform.worker.stack import Stack, _members, cat_inputs, run_stack
from ndebench.platform.worker.stackgraph import StackedWeights, StackRegion
from ndebench.platform.worker.state import load_trial_state, save_trial_state
from ndebench.regularizers import continuum_dropout
from test_stack import TRAINING, _spec

REGION = SolverConfig("euler", adjoint=False, cuda_graph="stack")


@pytest.mark.parametrize("optimizer", ["adam", "sgd"])
def test_members_trained_as_one_region_end_as_alone_up_to_float32_reduction_order(optimizer):
    """The region sums each member's matrix products in another order than its trial alone (batched products)
    and steps the optimizer at learning rate 1 before scaling by the member's own: float32 ulps per step. Over
    three epochs (early stopping out of play) the validation and test NLL move by about 2e-5 relative
    (observed 1.5e-5); 1e-4 is asserted, and every decision (epochs, best epoch, accuracy) is the same."""
    training = dataclasses.replace(TRAINING, epochs=3, min_epochs=3, optimizer=optimizer, grad_clip=1.0,
                                   scheduler="plateau")
    specs = [_spec(seed, solver=REGION, training=training) for seed in (0, 1, 2)]
    notes: list[str] = []
    stacked = run_stack(specs, note=notes.append)
    assert notes == []
    for a, b in zip([run_trial(s) for s in specs], stacked, strict=True):
        assert (a.status, a.epochs, a.best_epoch) == (b.status, b.epochs, b.best_epoch) == ("ok", 3, b.best_epoch)
        assert a.val["val_accuracy"] == b.val["val_accuracy"] and a.test["test_accuracy"] == b.test["test_accuracy"]
        assert b.val["val_nll"] == pytest.approx(a.val["val_nll"], rel=1e-4)
        assert b.test["test_nll"] == pytest.approx(a.test["test_nll"], rel=1e-4)
        assert a.protocol == b.protocol


def test_a_region_stack_resumed_from_its_members_checkpoints_ends_as_an_uninterrupted_one(tmp_path):
    # The checkpoints hold each member's own weights and optimizer state (the stacked state given back at the end
    # of every epoch); a resumed region stacks them again, at the same step count.
    specs = [_spec(seed, solver=REGION, training=dataclasses.replace(TRAINING, epochs=4, patience=3))
             for seed in (4, 5)]
    folders = [tmp_path / str(s.seed) for s in specs]

    def keep(folder):
        def hook(epoch, snapshot):
            if epoch == 2:
                state = snapshot()
                assert all(len(v) == 3 for v in state["optimizer"]["state"].values())  # step, exp_avg, exp_avg_sq
                save_trial_state(state, folder)
        return hook

    for folder in folders:
        folder.mkdir()
    full = run_stack(specs, on_checkpoint=[keep(f) for f in folders])
    resumed = run_stack(specs, resume_states=[load_trial_state(f) for f in folders])
    for a, b in zip(full, resumed, strict=True):
        assert (a.status, a.epochs, a.best_epoch, a.val, a.test) == (b.status, b.epochs, b.best_epoch, b.val, b.test)


def test_a_diverging_member_is_masked_and_the_others_end_as_alone(monkeypatch):
    poison_training_set(monkeypatch, seed=1)
    training = dataclasses.replace(TRAINING, epochs=2, min_epochs=2)
    specs = [_spec(seed, solver=REGION, training=training) for seed in (0, 1, 2)]
    alone = [run_trial(s) for s in specs]
    stacked = run_stack(specs)
    assert [r.status for r in stacked] == [r.status for r in alone] == ["ok", "diverged", "ok"]
    assert stacked[1].message == alone[1].message
    for k in (0, 2):
        assert stacked[k].test["test_nll"] == pytest.approx(alone[k].test["test_nll"], rel=1e-4)


def _models(k: int) -> list[torch.nn.Module]:
    torch.manual_seed(0)
    return [torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh(), torch.nn.Linear(4, 2)).double()
            for _ in range(k)]


@pytest.mark.parametrize("kind", ["adam", "sgd"])
def test_the_stacked_step_is_each_member_s_own_and_a_masked_member_stays_frozen_bit_for_bit(kind):
    def optimizer(model, lr):
        if kind == "sgd":
            return torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9, weight_decay=1e-3)
        return torch.optim.Adam(model.parameters(), lr=lr, weight_decay=1e-3)

    lrs, active = [0.1, 0.02, 0.005], torch.tensor([True, False, True])
    stacked, alone = _models(3), _models(3)
    weights = StackedWeights(stacked, [optimizer(m, lr) for m, lr in zip(stacked, lrs, strict=True)])
    own = [optimizer(m, lr) for m, lr in zip(alone, lrs, strict=True)]
    weights.bind(stacked, [optimizer(m, lr) for m, lr in zip(stacked, lrs, strict=True)])
    frozen = [p.detach().clone() for p in stacked[1].parameters()]
    x = torch.randn(5, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    for step in range(4):
        weights.zero_grad()
        sum((m(x * (k + 1)) ** 2).sum() * (step + 1) for k, m in enumerate(stacked)).backward()
        weights.step(active, max_norm=0.5)
        for k, (m, o) in enumerate(zip(alone, own, strict=True)):
            if not active[k]:
                continue
            o.zero_grad()
            ((m(x * (k + 1)) ** 2).sum() * (step + 1)).backward()
            torch.nn.utils.clip_grad_norm_(m.parameters(), 0.5)
            o.step()
    for k in (0, 2):
        for a, b in zip(alone[k].parameters(), stacked[k].parameters(), strict=True):
            assert torch.allclose(a, b, rtol=0, atol=1e-12)
    assert all(torch.equal(a, b) for a, b in zip(frozen, stacked[1].parameters(), strict=True))
    assert not torch.equal(next(alone[0].parameters()), next(_models(1)[0].parameters()))
    assert all(torch.equal(v[1], torch.zeros_like(v[1])) for p in weights.params
               for v in weights.optimizer.state[p].values() if v.dim() > 0)


def test_members_at_different_optimizer_steps_are_refused_by_name():
    models = _models(2)
    optimizers = [torch.optim.Adam(m.parameters()) for m in models]
    for steps, (model, optimizer) in enumerate(zip(models, optimizers, strict=True), start=1):
        for _ in range(steps):
            optimizer.zero_grad()
            model(torch.ones(1, 3, dtype=torch.float64)).sum().backward()
            optimizer.step()
    with pytest.raises(ValueError, match=r"different steps \[1.0, 2.0\]"):
        StackedWeights(models, optimizers)


def test_members_whose_scalar_parameter_has_moments_stack_after_a_step():
    """A 0-dim parameter (an SDE's ``theta``) has 0-dim Adam moments, which differ between members: they stack on
    the member axis, and only ``step`` must agree (the LNSDE's region fell back to eager after its first repack)."""
    models = [torch.nn.Linear(3, 2).double() for _ in range(2)]
    for k, model in enumerate(models):
        model.theta = torch.nn.Parameter(torch.tensor(float(k + 1), dtype=torch.float64))
    optimizers = [torch.optim.Adam(m.parameters()) for m in models]
    for k, (model, optimizer) in enumerate(zip(models, optimizers, strict=True)):
        ((model(torch.ones(1, 3, dtype=torch.float64)).sum() + model.theta ** 2) * (k + 1)).backward()
        optimizer.step()
    weights = StackedWeights(models, optimizers)
    theta = weights.params[weights.names.index("theta")]
    state = weights.optimizer.state[theta]
    assert theta.shape == state["exp_avg"].shape == (2,) and state["step"].item() == 1.0
    assert torch.equal(state["exp_avg"], torch.stack([o.state[m.theta]["exp_avg"] for m, o in zip(
        models, optimizers, strict=True)]))


def test_the_region_s_training_step_passes_the_host_sync_guard(monkeypatch):
    # On the CPU the draw's host shortcuts (a per-interval loop, numpy's cast) are taken out, so that the
    # whole-tensor path a GPU takes is the one checked; SGD, since torch's Adam reads its step count on the
    # host unless capturable (which CUDA's capture path sets, and the GPU suite checks).
    monkeypatch.setattr(continuum_dropout, "_HOST_SHORTCUTS", frozenset())
    training = dataclasses.replace(TRAINING, optimizer="sgd", grad_clip=1.0)
    specs = [_spec(seed, solver=REGION, training=training) for seed in (0, 1)]
    members = _members(specs, [None, None], Deadline(None))
    region = StackRegion(Stack(members[0].built.model), members)
    for m in members:
        m.built.model.train()
    region.weights.bind(region.models, region.optimizers)
    batches = [next(m.built.feeds["train"].batches(m.built.batch_size, m.training.rng.shuffle)) for m in members]
    inputs, targets = cat_inputs([b[0] for b in batches]), torch.cat([b[1] for b in batches])
    region.step(inputs, targets)  # the warm-up a capture makes first: host-side caches fill here
    before = [p.detach().clone() for p in region.weights.params]
    with host_sync_guard():
        region.step(inputs, targets)
    assert all(not torch.equal(a, b) for a, b in zip(before, region.weights.params, strict=True))
    assert region.active.all()
    rngs = region._evaluation_rngs()  # and the evaluation's solve, three MC passes of every member
    passes = cat_inputs([repeat_batch(b[0], 3) for b in batches])
    with torch.no_grad():
        region._latent(passes, rngs)
        with host_sync_guard():
            assert region._latent(passes, rngs).shape[0] == 3 * targets.shape[0]


@pytest.mark.parametrize("solver,reason", [
    (SolverConfig("euler", step_size=0.05, adjoint=False, cuda_graph="stack"), "step_size=0.05"),
    (SolverConfig("euler", adjoint=True, cuda_graph="stack"), "adjoint"),
])
def test_a_stack_the_region_cannot_hold_trains_batched_eager_and_says_why(solver, reason):
    training = dataclasses.replace(TRAINING, epochs=1)
    notes: list[str] = []
    results = run_stack([_spec(seed, solver=solver, training=training) for seed in (0, 1)], note=notes.append)
    assert [r.status for r in results] == ["ok", "ok"]
    assert len(notes) == 1 and "not as one region" in notes[0] and reason in notes[0]


def _chain_changes(rates, grid: torch.Tensor) -> float:
    """E[number of grid intervals whose end state differs from their start] of the two-state chain started active
    (by uniformization: an interval of length dt has an event with probability q = 1 - exp(-s dt), which sets
    the state inactive with probability a = lambda1 / s)."""
    s = rates.lambda1 + rates.lambda2
    a, active, total = rates.lambda1 / s, 1.0, 0.0
    for dt in (grid[1:] - grid[:-1]).double().tolist():
        q = -torch.expm1(torch.tensor(-s * dt, dtype=torch.float64)).item()
        total += active * q * a + (1 - active) * q * (1 - a)
        active = active * (1 - q * a) + (1 - active) * q * (1 - a)
    return total


def test_the_region_s_draws_keep_the_law_per_member_from_each_member_s_own_stream(monkeypatch):
    # The whole-tensor draw (the GPU's, run here on the CPU) through the stacked regularizer: member k's mask from
    # its own generator, with its own p and rates (solve_rates(p, m)). P(inactive at T) = p_k and the mean number
    # of state changes on the grid (the chain's, exactly) within 4 standard errors; the two members' flags
    # uncorrelated (|r| < 4 / sqrt(n)); a member's mask is the one its generator gives alone.
    from ndebench.models.integrate import TrialRNG
    from ndebench.platform.worker.stack import StackedRegularizer
    from ndebench.regularizers.base import PassSpec
    from ndebench.regularizers.continuum_dropout import ContinuumDropout

    monkeypatch.setattr(continuum_dropout, "_HOST_SHORTCUTS", frozenset())
    members = [ContinuumDropout(0.2, 5), ContinuumDropout(0.5, 5)]
    stacked = StackedRegularizer(members[0])
    stacked.members = [(reg, TrialRNG.from_seed(seed)) for reg, seed in zip(members, (3, 4), strict=True)]
    grid = torch.linspace(0, 1, 101)
    batch, hidden = 200, 100
    spec = PassSpec(2 * batch, hidden, 0.0, 1.0, grid, torch.Generator(), torch.device("cpu"), torch.float32)
    draws = stacked.draw(spec)
    flags = [d.step_masks for d in draws]  # (S, B, H) per member: 1 active, 0 inactive
    n = batch * hidden
    for reg, mask in zip(members, flags, strict=True):
        inactive = 1 - mask[-1].double().mean().item()
        assert abs(inactive - reg.p) < 4 * (reg.p * (1 - reg.p) / n) ** 0.5, (reg.p, inactive)
        changes = (mask[1:] != mask[:-1]).double().sum(0)
        expected = _chain_changes(reg.rates(1.0), grid[:-1])
        assert abs(changes.mean().item() - expected) < 4 * changes.std().item() / n**0.5, (expected, changes.mean())
    r = torch.corrcoef(torch.stack([flags[0][-1].flatten(), flags[1][-1].flatten()]).double())[0, 1].item()
    assert abs(r) < 4 / n**0.5
    alone = members[1].draw(dataclasses.replace(spec, batch_size=batch, generator=TrialRNG.from_seed(4).regularizer))
    assert torch.equal(alone.step_masks, flags[1])


def test_members_the_region_refuses_train_that_epoch_batched_and_eager_and_say_why_once(monkeypatch):
    from ndebench.platform.worker import stackgraph

    def refuse(stack, members):
        raise ValueError("the members' optimizers stand at different steps [3.0, 5.0]")

    monkeypatch.setattr(stackgraph, "StackRegion", refuse)
    notes: list[str] = []
    epochs = stackgraph.RegionEpochs(None, lambda members: {id(m): 0.5 for m in members}, notes.append)
    members = [object(), object()]
    assert epochs(members) == epochs(members) == {id(m): 0.5 for m in members}
    assert notes == ["stack of 2 trained as batched eager passes, not as one region: the members' optimizers stand "
                     "at different steps [3.0, 5.0]"]


def test_validation_with_mc_passes_through_the_region_equals_the_batched_eager_stack_s():
    # The region's evaluation solves every member's N = 3 passes with the captured solve's grid steps from the
    # stacked weights; the eager stack solves them with torchdiffeq from the gathered weights: the same steps and
    # the same draws (each member's evaluation generator reset to its seed's stream), float32 rounding apart.
    # A second evaluation repeats the first bit for bit.
    params = {"p": 0.3, "m": 10, "n_mc": 3}
    specs = [_spec(seed, solver=REGION, regularizer_params=params) for seed in (0, 1)]
    members = _members(specs, [None, None], Deadline(None))
    eager = Stack(members[0].built.model).evaluate(members, "val")
    region = StackRegion(Stack(members[0].built.model), members)
    first, again = region.evaluate("val"), region.evaluate("val")
    assert first == again
    for (mine, _), (theirs, _) in zip(first, eager, strict=True):
        assert mine["accuracy"] == theirs["accuracy"]
        assert mine["nll"] == pytest.approx(theirs["nll"], rel=1e-5)
        assert mine["z_cov_trace"] == pytest.approx(theirs["z_cov_trace"], rel=1e-4)


@pytest.mark.parametrize("model", ["neural_sde", "neural_lsde", "neural_lnsde", "neural_gsde", "ode_rnn", "gru_ode",
                                   "ancde"])
def test_every_time_series_model_trains_as_one_region_and_its_members_end_as_alone(model):
    """Each member as its trial alone within the tolerance above (1e-4 relative; observed about 2e-8): an SDE
    member's increments its own Brownian motion's on torchsde's step times, ODE-RNN's GRU cell and the SDEs'
    ``theta`` stacked leaves like every weight. SGD, as ``test_stack.py`` says why (Adam turns an ulp of a
    near-zero gradient component into a full step)."""
    training = dataclasses.replace(TRAINING, epochs=2, min_epochs=2, optimizer="sgd")
    specs = [_spec(seed, model=model, solver=REGION, training=training) for seed in (0, 1)]
    notes: list[str] = []
    stacked = run_stack(specs, note=notes.append)
    assert notes == []
    for a, b in zip([run_trial(s) for s in specs], stacked, strict=True):
        assert (a.status, a.epochs, a.best_epoch) == (b.status, b.epochs, b.best_epoch) == ("ok", 2, a.best_epoch)
        assert b.val["val_nll"] == pytest.approx(a.val["val_nll"], rel=1e-4)
        assert b.test["test_nll"] == pytest.approx(a.test["test_nll"], rel=1e-4)
        assert a.val["val_accuracy"] == b.val["val_accuracy"]


def test_an_sde_region_asks_each_member_s_brownian_motion_for_torchsde_s_own_steps():
    # The increments the region hands its solve are what torchsde's Euler solve asks the member's motion alone.
    import torchsde
    from ndebench.models.integrate import StackedRNG, TrialRNG, sde_steps

    times = torch.linspace(0, 1, 37)
    dt = float((times[1:] - times[:-1]).min())
    seen = []

    class Recorder(torchsde.SDEIto):
        def __init__(self):
            super().__init__(noise_type="diagonal")

        def f(self, t, y):
            seen.append(float(t))
            return torch.zeros_like(y)

        def g(self, t, y):
            return torch.ones_like(y)

    z0 = torch.zeros(3, 2)
    path = torchsde.sdeint(Recorder(), z0, times, bm=TrialRNG.from_seed(5).brownian(times, z0), dt=dt,
                          method="euler")
    steps = sde_steps(times, dt)
    assert steps[:-1] == seen[1:] and steps[-1] == float(times[-1])  # seen[0]: torchsde checks f's shape
    stacked = StackedRNG.from_seed(0)
    stacked.members = [TrialRNG.from_seed(4), TrialRNG.from_seed(5)]
    bm = stacked.brownian(times, torch.zeros(6, 2))
    increments = torch.stack([bm(a, b) for a, b in zip(steps[:-1], steps[1:], strict=True)])
    total = torch.zeros(6, 2)
    for increment in increments:
        total = total + increment
    assert torch.equal(total[3:], path[-1])  # member 1's Brownian path at T, as torchsde summed it alone
