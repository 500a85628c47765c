"""Stacked trials: K trials that share every shape (the seeds of an evaluate cell) trained in one process, with
one batched solve per mini-batch instead of K.

Each member is a whole trial of its own (:class:`~ndebench.platform.worker.loop.Training`): its seed, data split,
initial weights, batch order, regularizer generator, head-dropout stream (the torch global generator it would
have had alone), optimizer, scheduler, early stopping, checkpoints and result. Only the latent solve is shared:
a copy of the first member's model whose ``nn.Linear`` and ``nn.GRUCell`` layers outside the head are stacked
(:mod:`~ndebench.platform.worker.stacklayers`: member k's rows through member k's weights), whose regularizer is
:class:`StackedRegularizer` (member k's draw from member k's generator, its ``modulate`` on member k's rows) and
whose SDE noise is member k's own Brownian motion on member k's rows
(:class:`~ndebench.models.integrate.StackedRNG`). The mini-batches of the members are concatenated
member-major, ``(K * B, ...)``; the head, the loss, gradient clipping and the optimizer step stay per member.
Validation and test solve all members' batches at once too (:meth:`Stack.evaluate`), each member's predictions
and metrics computed as its trial's alone.

A model that cannot be stacked this way (a vector field with parameters other than ``nn.Linear`` and
``nn.GRUCell``, an SDE whose trial alone draws captured increments on the device), members that differ in a
shape, or members that differ in more than their seed and their regularizer's hyperparameters
(:func:`differing`), train one after another in this process (:func:`run_trial`), with the reason in ``note``
of every member's result. With ``solver.cuda_graph: stack`` a stack's training step is one region instead, its
members' weights stacked (:mod:`~ndebench.platform.worker.stackgraph`).
"""
from __future__ import annotations

import contextlib
import copy
import dataclasses
import functools
import math
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from ndebench.models.base import Inputs, NDEClassifier, Prediction, cat_inputs, repeat_batch
from ndebench.models.integrate import StackedRNG, TrialRNG, step_limit
from ndebench.platform.failures.deadline import Deadline, TrialTimeout
from ndebench.platform.worker.build import BuiltTrial, build_trial
from ndebench.platform.worker.evaluation import evaluate, score, trial_loss
from ndebench.platform.worker.loop import Training, run_trial
from ndebench.platform.worker.spec import TrialResult, TrialSpec
from ndebench.platform.worker.stackexact import rounds_alone
from ndebench.platform.worker.stackgraph import RegionEpochs, region_blocker
from ndebench.platform.worker.stacklayers import members_rows, stack_layers, unstackable
from ndebench.regularizers.base import PassSpec, Regularizer
from torch import nn

EpochHook = Callable[[dict[str, float]], None]
CheckpointHook = Callable[[int, Callable[[], dict[str, Any]]], None]
EpochTrainer = Callable[[list["Member"]], dict[int, float | None]]
Evaluator = Callable[[list["Member"], str], list[tuple[dict[str, float], dict[str, Any]]]]


# what a stacked solve raises where a layer cannot take the members' rows (Stack.mismatch reports it)
_SOLVE_ERRORS = (AttributeError, RuntimeError, TypeError)


class StackedRegularizer(Regularizer):
    """The members' regularizers on a member-major batch: each draws its own pass from its own generator
    (``PassSpec`` of ``B = batch / K`` rows) and modulates its own rows."""

    def __init__(self, first: Regularizer):
        super().__init__()
        self.test_time, self.stochastic = first.test_time, first.stochastic  # type: ignore[misc]
        self.control_scope, self.n_mc, self.head_dropout = first.control_scope, first.n_mc, first.head_dropout
        self.members: list[tuple[Regularizer, TrialRNG]] = []

    def active(self) -> bool:
        return self.members[0][0].active()

    def draw(self, spec: PassSpec) -> Any:
        size = spec.batch_size // len(self.members)
        regularizers, specs = [r for r, _ in self.members], []
        for regularizer, rng in self.members:
            regularizer.step_clock = spec.clock
            specs.append(dataclasses.replace(spec, batch_size=size, generator=rng.regularizer_on(spec.device),
                                             clock=spec.clock))
        together = regularizers[0].draw_stacked(regularizers, specs)
        if together is not None:
            return _Together(together)
        return [regularizer.draw(own) for regularizer, own in zip(regularizers, specs, strict=True)]

    def modulate(self, draw: Any, t: torch.Tensor, z: torch.Tensor, out: torch.Tensor, role: Any) -> torch.Tensor:
        if isinstance(draw, _Together):
            return self.members[0][0].modulate(draw.draw, t, z, out, role)
        k = len(self.members)
        return torch.cat([regularizer.modulate(d, t, zk, ok, role) for (regularizer, _), d, zk, ok
                          in zip(self.members, draw, z.chunk(k), out.chunk(k), strict=True)])

    def step_mask(self, draw: Any) -> torch.Tensor | None:
        return self.members[0][0].step_mask(draw.draw) if isinstance(draw, _Together) else None

    def end_time(self, draw: Any, t0: float, t1: float) -> float:
        if isinstance(draw, _Together):
            return self.members[0][0].end_time(draw.draw, t0, t1)
        ends = {regularizer.end_time(d, t0, t1) for (regularizer, _), d in zip(self.members, draw, strict=True)}
        if len(ends) > 1:
            raise RuntimeError(f"stacked members end their passes at different times {sorted(ends)}")
        return ends.pop()


@dataclass
class _Together:
    """A pass's draw that one ``modulate`` applies to all members' rows (``Regularizer.draw_stacked``)."""

    draw: Any


def differing(specs: Sequence[TrialSpec]) -> list[str]:
    """The :class:`TrialSpec` fields other than ``seed`` and ``regularizer_params`` in which ``specs`` differ: a
    stack's members (an evaluate cell's seeds, a tune stage's grid points) share every model, training, solver
    and data setting."""
    first = specs[0]
    return [f.name for f in dataclasses.fields(TrialSpec) if f.name not in ("seed", "regularizer_params")
            and any(getattr(s, f.name) != getattr(first, f.name) for s in specs[1:])]


def _shape(built: BuiltTrial) -> tuple[Any, ...]:
    return (built.batch_size, built.num_classes, tuple(len(f) for f in built.feeds.values()),
            tuple((n, tuple(p.shape)) for n, p in built.model.named_parameters()))


@dataclass
class Member:
    """One trial of a stack: its spec, model and data, training state, own global-generator state (what its
    head's dropout draws from) and result once it ended."""

    spec: TrialSpec
    built: BuiltTrial
    training: Training
    torch_state: torch.Tensor
    result: TrialResult | None = None

    @contextlib.contextmanager
    def own_generator(self) -> Iterator[None]:
        """The torch global generator set to this member's stream for the duration (and its advance kept)."""
        saved = torch.get_rng_state()
        torch.set_rng_state(self.torch_state)
        try:
            yield
        finally:
            self.torch_state = torch.get_rng_state()
            torch.set_rng_state(saved)

    def snapshot(self) -> dict[str, Any]:
        with self.own_generator():
            return self.training.snapshot()

    @property
    def running(self) -> bool:
        return self.result is None and not self.training.stop and self.training.epoch < self.spec.training.epochs


class Stack:
    """The shared latent solve of a stack's running members (see the module docstring)."""

    def __init__(self, first: NDEClassifier, exact: bool = False):
        self.model = copy.deepcopy(first)
        # A captured graph would keep reading the weights gathered at capture, and its backward would give the
        # members' own weights no gradient: a stack's solve runs eager (a region of stacked weights captures).
        self.model.solver = dataclasses.replace(first.solver, cuda_graph="off")
        self.model._graph_notes.clear()
        self.model.head = nn.Identity()
        self.linears = stack_layers(self.model, exact)
        self.regularizer = StackedRegularizer(first.regularizer)
        self.model.regularizer = self.regularizer
        self.rng = StackedRNG.from_seed(0)  # its own streams unused: the members' regularizers and noise draw

    def latent(self, members: Sequence[Member], inputs: Inputs, rngs: Sequence[TrialRNG] | None = None
               ) -> torch.Tensor:
        """``z(T)`` of every member's batch, ``(K * B, H)``, member-major; the regularizer draws from ``rngs``
        (default: each member's training generators)."""
        models = [m.built.model for m in members]
        for linear in self.linears:
            linear.gather(models)
        rngs = rngs or [m.training.rng for m in members]
        self.rng.members = list(rngs)
        self.regularizer.members = [(m.regularizer, rng) for m, rng in zip(models, rngs, strict=True)]
        self.model.train(models[0].training)
        return self.model.latent(inputs, self.rng)

    @torch.no_grad()
    def evaluate(self, members: Sequence[Member], split: str) -> list[tuple[dict[str, float], dict[str, Any]]]:
        """:func:`~ndebench.platform.worker.evaluation.evaluate` of every member on ``split``, the N passes of each
        member's batch (its ``n_mc``, the same for all) solved at once for all members: member k's rows are its
        N passes pass-major, as its :meth:`~ndebench.models.base.NDEClassifier.predict` stacks them, and its
        regularizer draws from its own evaluation generator."""
        n = members[0].built.model.n_mc()
        if any(m.built.model.n_mc() != n for m in members):
            return [evaluate(m.built.model, m.built.feeds[split], m.built.batch_size, m.spec.seed, top5=m.built.top5)
                    for m in members]
        for m in members:
            m.built.model.eval()
        rngs = [TrialRNG.for_evaluation(m.spec.seed) for m in members]
        feeds = [m.built.feeds[split].batches(m.built.batch_size, None) for m in members]
        predictions: list[list[tuple[Prediction, torch.Tensor]]] = [[] for _ in members]
        for batches in zip(*feeds, strict=True):
            z = self.latent(members, cat_inputs([repeat_batch(inputs, n) for inputs, _ in batches]), rngs)
            for mine, m, zk, (_, targets) in zip(predictions, members, members_rows(z, len(members)), batches,
                                                 strict=True):
                mine.append((m.built.model.predict_from(zk.view(n, targets.shape[0], -1)), targets))
        return [score(m.built.model, mine, top5=m.built.top5) for m, mine in zip(members, predictions, strict=True)]

    @torch.no_grad()
    def mismatch(self, members: Sequence[Member]) -> str | None:
        """Why the stacked solve does not give each member's own ``z(T)`` on its first validation batch
        (evaluation mode, fresh evaluation generators on both sides), or ``None`` when it does. A layer fed a
        tensor whose first dimension is not the batch would mix members' rows, a model that reads a layer's
        ``weight`` itself finds none: this catches both before training."""
        batches = [next(m.built.feeds["val"].batches(m.built.batch_size, None)) for m in members]
        for m in members:
            m.built.model.eval()
        alone = torch.cat([m.built.model.latent(b[0], TrialRNG.for_evaluation(m.spec.seed))
                           for m, b in zip(members, batches, strict=True)])
        try:
            stacked = self.latent(members, cat_inputs([b[0] for b in batches]),
                                  [TrialRNG.for_evaluation(m.spec.seed) for m in members])
        except _SOLVE_ERRORS as exc:
            return f"the stacked solve fails ({type(exc).__name__}: {exc})"
        if stacked.shape != alone.shape or not torch.allclose(stacked, alone, rtol=1e-4, atol=1e-6):
            return "the stacked solve does not reproduce the members' own (a layer mixes members' rows)"
        return None


def _train_epoch(stack: Stack, members: list[Member]) -> dict[int, float | None]:
    """One pass of every running member over its own training batches; member index -> mean loss, or ``None``
    for a member whose batch loss became non-finite (it takes no further step, as a trial alone would stop)."""
    feeds = {id(m): m.built.feeds["train"].batches(m.built.batch_size, m.training.rng.shuffle) for m in members}
    sums = {id(m): [0.0, 0] for m in members}
    losses: dict[int, float | None] = {}
    alive = list(members)
    for m in alive:
        m.built.model.train()
    while alive:
        batches = [next(feeds[id(m)], None) for m in alive]
        if batches[0] is None:
            break
        z = stack.latent(alive, cat_inputs([b[0] for b in batches]))
        terms = []
        for m, zk, (_, targets) in zip(alive, members_rows(z, len(alive)), batches, strict=True):
            m.training.optimizer.zero_grad(set_to_none=True)
            with m.own_generator():
                logits = m.built.model.head(zk)
            terms.append(trial_loss(logits, targets, m.built.pos_weight) + m.built.model.penalty().to(z.device))
        finite = [bool(torch.isfinite(t)) for t in terms]
        for m, ok in zip(alive, finite, strict=True):
            if not ok:
                losses[id(m)] = None
        if any(finite):
            torch.stack([t for t, ok in zip(terms, finite, strict=True) if ok]).sum().backward()
        kept = []
        for m, loss, ok, (_, targets) in zip(alive, terms, finite, batches, strict=True):
            if not ok:
                continue
            if m.training.cfg.grad_clip:
                torch.nn.utils.clip_grad_norm_(m.built.model.parameters(), m.training.cfg.grad_clip)
            m.training.optimizer.step()
            sums[id(m)][0] += loss.item() * targets.shape[0]
            sums[id(m)][1] += targets.shape[0]
            kept.append(m)
        alive = kept
    for m in alive:
        losses[id(m)] = sums[id(m)][0] / sums[id(m)][1]
    return losses


def _checked_rounds_alone(stack: Stack, members: Sequence[Member]) -> bool:
    """:func:`rounds_alone`, ``False`` where the stacked solve raises (:meth:`Stack.mismatch` then says why)."""
    try:
        return rounds_alone(stack, members)
    except _SOLVE_ERRORS:
        return False


def _members(specs: Sequence[TrialSpec], resume: Sequence[dict[str, Any] | None], deadline: Deadline) -> list[Member]:
    members = []
    for spec, state in zip(specs, resume, strict=True):
        built = build_trial(spec)  # seeds the global generators from spec.seed, as a trial alone
        for feed in built.feeds.values():
            feed.deadline = deadline
        training = Training(built, spec.training, spec.seed)
        if state is not None:
            training.restore(state)
        members.append(Member(spec, built, training, torch.get_rng_state()))
    return members


def run_stack(
    specs: Sequence[TrialSpec],
    *,
    on_epoch: Sequence[EpochHook | None] | None = None,
    on_checkpoint: Sequence[CheckpointHook | None] | None = None,
    resume_states: Sequence[dict[str, Any] | None] | None = None,
    evaluate_test: bool = True,
    timeout_s: float | None = None,
    note: Callable[[str], None] | None = None,
    on_stack_epoch: Callable[[], None] | None = None,
    exact: bool = False,
    widths: list[int] | None = None,
) -> list[TrialResult]:
    """Train and evaluate the trials ``specs`` as one stack; the results in the order of ``specs``.

    Every member behaves as :func:`~ndebench.platform.worker.loop.run_trial` of its spec, with its own
    ``on_epoch[k]``, ``on_checkpoint[k]`` and ``resume_states[k]``; a member that stops early, diverges or
    finishes leaves the stack and the others go on. ``epoch_time_s`` and ``train_time_s`` are the stack's (all
    running members train in the same batched passes). ``timeout_s`` bounds the whole stack: at the deadline
    every unfinished member ends with status ``timeout``. ``note`` receives one line when the stack falls back
    to training its members one after another (see the module docstring). ``on_stack_epoch()`` is called after
    each epoch of the stack, once every running member's hooks ran (after each member's checkpoint hook when the
    members train one after another): where a caller reports the stack's progress and checkpoints. ``widths``
    gains the number of members each stacked epoch trains (nothing when they train one after another): a member
    leaves the stack at the end of the epoch it stops in, and the next epoch stacks the running ones alone.

    Every member draws from its own generators, so its randomness is that of its trial alone. The arithmetic:
    the batched matrix products of the stacked layers sum in another order than one member's, a few float32
    ulps per step (over 2 epochs, about 1e-5 relative in the test NLL): the same metrics in law, not the same
    bits. With ``exact`` each member's layers run alone: on the CPU a member's result is then bit for bit its
    trial's alone where every elementwise kernel rounds alike on K * B rows as on B (the quickstart's Neural CDE
    does; a vectorised ``tanh``'s scalar tail can round one element an ulp apart on other shapes).
    """
    k = len(specs)
    hooks = list(on_epoch or [None] * k), list(on_checkpoint or [None] * k), list(resume_states or [None] * k)
    if not all(len(h) == k for h in hooks):
        raise ValueError(f"run_stack: {k} specs need {k} on_epoch, on_checkpoint and resume_states entries")
    deadline = Deadline(timeout_s)
    members = _members(specs, hooks[2], deadline)
    why = unstackable(members[0].built.model) if k > 1 else "one member"
    if why is None and (fields := differing(specs)):
        why = f"the members differ in more than their seeds and regularizer hyperparameters: {', '.join(fields)}"
    if why is None and len({_shape(m.built) for m in members}) > 1:
        why = "the members differ in a shape (data split sizes, batch size or parameters)"

    def fallback(why: str) -> list[TrialResult]:
        if k > 1 and note is not None:
            note(f"stack of {k} trained one after another: {why}")
        return [run_trial(spec, on_epoch=e, on_checkpoint=_then(c, on_stack_epoch), resume_state=r,
                          evaluate_test=evaluate_test, timeout_s=timeout_s)
                for spec, e, c, r in zip(specs, *hooks, strict=True)]

    if why is not None:
        return fallback(why)
    try:
        stack = Stack(members[0].built.model, exact)
        # bit for bit as alone is within mismatch's tolerance too: only a stack that rounds otherwise is asked it
        alone = not exact and _checked_rounds_alone(stack, members)
        why = None if alone else stack.mismatch(members)
        if why is not None:
            return fallback(why)
        if not exact and not alone:  # an ulp that would move early stopping
            stack = Stack(members[0].built.model, exact=True)
        epochs: EpochTrainer = functools.partial(_train_epoch, stack)
        evaluate: Evaluator = stack.evaluate
        if _region_asked(specs[0]):
            region = "exact arithmetic asked" if exact else region_blocker(members[0].built.model)
            if region is None:
                epochs = regions = RegionEpochs(stack, epochs, note)
                evaluate = regions.evaluate
            elif note is not None:
                note(f"stack of {k} trained as batched eager passes, not as one region: {region}")
        _train(epochs, evaluate, members, hooks[0], hooks[1], on_stack_epoch, widths)
        done = [m for m in members if m.result is None]
        for m in done:
            m.training.load_selected(m.spec)
        tested = dict(zip(map(id, done), evaluate(done, "test"), strict=True)) if done and evaluate_test else {}
        return [m.result or m.training.finish(m.spec, evaluate_test, tested.get(id(m))) for m in members]
    except TrialTimeout as exc:
        return [m.result or m.training.ended("timeout", f"{exc}, in epoch {m.training.epoch}") for m in members]
    except AssertionError as exc:
        limit = step_limit(exc, specs[0].solver, "adjoint backward")  # the forward solve raises it itself
        if limit is None:
            raise
        raise limit from exc


def _region_asked(spec: TrialSpec) -> bool:
    """Whether ``spec``'s stack trains as one region (``solver.cuda_graph: stack``). Not by default, on the CPU
    either: its fixed-grid solve rounds otherwise than an ODE's solve alone, an ulp that training amplifies into
    another early stop (docs/performance.md), where the eager stack is checked bit for bit (:func:`rounds_alone`)."""
    return spec.solver is not None and spec.solver.cuda_graph == "stack"


def _then(hook: CheckpointHook | None, after: Callable[[], None] | None) -> CheckpointHook | None:
    if after is None:
        return hook

    def both(epoch: int, snapshot: Callable[[], dict[str, Any]]) -> None:
        if hook is not None:
            hook(epoch, snapshot)
        after()

    return both


def _train(epochs: EpochTrainer, evaluate: Evaluator, members: list[Member], on_epoch: list[EpochHook | None],
           on_checkpoint: list[CheckpointHook | None], on_stack_epoch: Callable[[], None] | None,
           widths: list[int] | None) -> None:
    hooks = {id(m): (e, c) for m, e, c in zip(members, on_epoch, on_checkpoint, strict=True)}
    running = [m for m in members if m.running]
    while running:
        if widths is not None:
            widths.append(len(running))
        start = time.perf_counter()
        for m in running:
            m.training.epoch += 1
        losses = epochs(running)
        train_time = time.perf_counter() - start
        for m in running:
            if losses[id(m)] is None:
                m.result = m.training.ended("diverged", f"non-finite training loss at epoch {m.training.epoch}")
        validated = [m for m in running if m.result is None]
        vals = dict(zip(map(id, validated), evaluate(validated, "val"), strict=True)) if validated else {}
        for m in validated:
            epoch_hook, checkpoint_hook = hooks[id(m)]
            loss, val = losses[id(m)], vals[id(m)][0]
            if epoch_hook is not None:
                epoch_hook(m.training.epoch_record(loss, val, start, train_time))
            if not math.isfinite(val["nll"]):
                m.result = m.training.ended("diverged", f"non-finite validation loss at epoch {m.training.epoch}")
                continue
            m.training.end_epoch(val)
            if checkpoint_hook is not None:
                checkpoint_hook(m.training.epoch, m.snapshot)
        if on_stack_epoch is not None:
            on_stack_epoch()
        running = [m for m in running if m.running]
