"""A stack trained as one captured region (``solver.cuda_graph: stack``) on a GPU: the cases the CPU cannot run
(``test_stack_region.py`` runs the same region eagerly on the CPU). Each skips where torch finds no CUDA device
(marker ``gpu``); ``.ci/gpu/run.sh`` runs them on a GPU machine."""
from __future__ import annotations

import pytest
import torch
from ndebench.models.integrate import SolverConfig
from ndebench.platform.spec.config import TrainingConfig
from ndebench.platform.worker.spec import TrialSpec

CUDA = torch.device("cuda")


def _spec(seed: int, setting: str, optimizer: str = "adam") -> TrialSpec:
    return TrialSpec(model="neural_cde", dataset="synthetic", regularizer="continuum_dropout",
                     regularizer_params={"p": 0.3, "m": 10}, model_params={"hidden_size": 16},
                     training=TrainingConfig(epochs=3, min_epochs=3, patience=3, lr=0.005, optimizer=optimizer,
                                             grad_clip=1.0),
                     solver=SolverConfig("euler", adjoint=False, cuda_graph=setting), seed=seed, device="cuda")


@pytest.mark.gpu
@pytest.mark.parametrize("optimizer", ["adam", "sgd"])
def test_a_captured_stack_ends_as_its_members_alone_and_eager(optimizer):
    # The members alone run eagerly (off); the stack replays one captured region per batch shape. Their sums run
    # in other orders (batched products, the learning rate applied after the step) and each member's masks come
    # from its own generator in both, so the test metrics agree up to float32 rounding over three epochs: NLL
    # within 1e-3 relative, accuracy within 0.02 and ECE within 0.01, as test_gpu.py's captured-vs-eager trial.
    from ndebench.platform.worker.loop import run_trial
    from ndebench.platform.worker.stack import run_stack

    notes: list[str] = []
    stacked = run_stack([_spec(seed, "stack", optimizer) for seed in (0, 1, 2)], note=notes.append)
    assert notes == []
    for seed, b in zip((0, 1, 2), stacked, strict=True):
        a = run_trial(_spec(seed, "off", optimizer))
        assert (a.status, a.epochs) == (b.status, b.epochs) == ("ok", 3)
        assert b.test["test_nll"] == pytest.approx(a.test["test_nll"], rel=1e-3)
        assert abs(a.test["test_accuracy"] - b.test["test_accuracy"]) <= 0.02
        assert abs(a.test["test_ece"] - b.test["test_ece"]) <= 0.01


@pytest.mark.gpu
def test_each_replay_draws_fresh_masks_from_each_member_s_own_stream():
    # Two stacks of the same seeds replay the same draws (the members' registered generators advance with each
    # replay); two replays of one batch differ (fresh masks); swapping the members' order swaps their results.
    from ndebench.models.base import cat_inputs
    from ndebench.platform.failures.deadline import Deadline
    from ndebench.platform.worker.stack import Stack, _members
    from ndebench.platform.worker.stackgraph import StackRegion

    def losses(seeds):
        members = _members([_spec(s, "stack") for s in seeds], [None] * len(seeds), Deadline(None))
        region = StackRegion(Stack(members[0].built.model), members)
        for m in members:
            m.built.model.train()
        region.weights.bind(region.models, region.optimizers)
        batch = [next(m.built.feeds["train"].batches(m.built.batch_size, None)) for m in members]
        inputs, targets = cat_inputs([b[0] for b in batch]), torch.cat([b[1] for b in batch])
        out = []
        for _ in range(3):
            region.sums.zero_()
            region.replay(inputs, targets)
            out.append(region.sums.clone())
        assert len(region.graphs) == 1
        return torch.stack(out)

    first, again, swapped = losses((0, 1)), losses((0, 1)), losses((1, 0))
    assert torch.equal(first, again)
    assert not torch.equal(first[0], first[1])
    assert torch.equal(first.flip(1), swapped)


@pytest.mark.gpu
def test_a_captured_optimizer_step_leaves_a_masked_member_frozen_and_steps_the_others_as_their_own():
    from ndebench.platform.worker.stackgraph import StackedWeights

    torch.manual_seed(0)
    models = [torch.nn.Linear(4, 3).to(CUDA) for _ in range(3)]
    alone = [torch.nn.Linear(4, 3).to(CUDA) for _ in range(3)]
    for a, m in zip(alone, models, strict=True):
        a.load_state_dict(m.state_dict())
    lrs = [0.1, 0.02, 0.005]

    def adam(ms):
        return [torch.optim.Adam(m.parameters(), lr=lr) for m, lr in zip(ms, lrs, strict=True)]

    weights = StackedWeights(models, adam(models))
    weights.bind(models, adam(models))
    own = adam(alone)
    x = torch.randn(8, 4, device=CUDA)
    active = torch.tensor([True, False, True], device=CUDA)
    frozen = [p.detach().clone() for p in models[1].parameters()]

    def step():
        weights.zero_grad()
        sum(m(x).square().sum() for m in models).backward()
        weights.step(active, max_norm=None)

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.stream(side):
        step()
    torch.cuda.current_stream().wait_stream(side)
    with torch.cuda.graph(graph):
        step()
    for _ in range(3):
        graph.replay()
    for k in (0, 2):
        for _ in range(4):  # the warm-up step and three replays
            own[k].zero_grad()
            alone[k](x).square().sum().backward()
            own[k].step()
        for a, b in zip(alone[k].parameters(), models[k].parameters(), strict=True):
            assert torch.allclose(a, b, rtol=1e-5, atol=1e-6)
    assert all(torch.equal(a, b) for a, b in zip(frozen, models[1].parameters(), strict=True))


@pytest.mark.gpu
def test_captured_validation_with_mc_passes_equals_the_eager_stack_s_and_repeats_itself():
    # Each evaluation resets the members' registered evaluation generators to their seeds' streams, so a second
    # replayed evaluation repeats the first; against the eager stack (torchdiffeq, gathered weights): the same
    # draws, float32 rounding apart (NLL within 1e-4 relative).
    import dataclasses

    from ndebench.platform.failures.deadline import Deadline
    from ndebench.platform.worker.stack import Stack, _members
    from ndebench.platform.worker.stackgraph import StackRegion

    specs = [dataclasses.replace(_spec(seed, "stack"), regularizer_params={"p": 0.3, "m": 10, "n_mc": 3})
             for seed in (0, 1)]
    members = _members(specs, [None, None], Deadline(None))
    eager = Stack(members[0].built.model).evaluate(members, "val")
    region = StackRegion(Stack(members[0].built.model), members)
    first, again = region.evaluate("val"), region.evaluate("val")
    assert first == again and any(key[0] == "eval" for key in region.graphs)
    for (mine, _), (theirs, _) in zip(first, eager, strict=True):
        assert mine["nll"] == pytest.approx(theirs["nll"], rel=1e-4)
