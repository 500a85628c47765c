"""A stack's training step as one region (``solver.cuda_graph: stack``, opt-in): one pass computes every member's
solve, head and loss, one backward gives each member its own gradient, one optimizer step updates them all.

The members' weights are held stacked (:class:`StackedWeights`): one leaf ``(K, *shape)`` per parameter name,
member k's own parameters views of row k (``.data`` and ``.grad``) while an epoch trains, so the stacked solve
(:mod:`~ndebench.platform.worker.stacklayers` reading the leaves) and each member's own head accumulate
into the same gradient, and every step reads the current weights. The solve is the fixed-grid
:class:`~ndebench.models.graphs.GridSolve` (an inline :class:`~ndebench.models.graphs.GraphCache`; ODE-RNN's
per-interval solves stay torchdiffeq's, so it trains in a region on the CPU only); each member's mask is drawn
in the region from its own regularizer generator. An SDE steps Euler-Maruyama on torchsde's own step times,
each member's increments asked of its own Brownian motion as its trial alone asks them
(:class:`~ndebench.models.integrate.StackedRNG`) and handed to the solve as one noise tensor.

On CUDA the region is captured as one CUDA graph per batch shape (torch's whole-network capture: warm-up on a
side stream, then ``torch.cuda.graph``; each replay reads static input buffers) with every member's device
generator registered with the graph, so a replay draws fresh masks from each member's own stream. On the CPU
the same region runs eagerly: the CPU suite checks that it equals the members trained alone and that it passes
:func:`~ndebench.models.graphs.host_sync_guard`. The capture has not run on a GPU yet, so ``auto`` never
chooses it.
"""
from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch
from ndebench.models.base import Inputs, NDEClassifier, TimedInputs, batch_size, cat_inputs, repeat_batch
from ndebench.models.graphs import CAPTURED, GraphCache, graph_decision
from ndebench.models.integrate import TrialRNG
from ndebench.platform.worker.evaluation import score, trial_loss
from torch import nn


def region_blocker(model: NDEClassifier) -> str | None:
    """Why a stack of ``model``'s trials cannot train as one region (``None``: it can): its solve must step on
    a grid that :func:`~ndebench.models.graphs.graph_decision` would capture (a fixed-step ODE or CDE method, or
    Euler-Maruyama, without adjoint or ``step_size``), its regularizer must hold no parameters (a penalty is a
    member's own) and, on CUDA, the model's own solve must be one it captures. On the CPU the region runs
    eagerly, so a model whose field reads per-batch data (a control path, ODE-RNN's observations) trains in it
    too. An SDE on CUDA does not: a member's increments must be its trial's alone, which torchsde's
    ``BrownianInterval`` draws with a generator it seeds on the host at every query (no capture holds that)."""
    solver, device = model.solver, next(model.parameters()).device
    sde = model.family == "sde"
    note = graph_decision(setting="on", device="cuda", method=solver.method, adjoint=solver.adjoint,
                          step_size=solver.step_size, kind="sde" if sde else "ode",
                          model_blocker=model.graph_blocker if device.type == "cuda" else None,
                          regularizer_blocker=model.regularizer.graph_blocker())
    if note != CAPTURED:
        return note.removeprefix("eager: ")
    if sde and device.type == "cuda":
        return ("torchsde's BrownianInterval, whose increments a member must share with its trial alone, seeds a "
                "generator on the host at every query (not capturable)")
    if any(True for _ in model.regularizer.parameters()):
        return f"the regularizer {type(model.regularizer).__name__} holds parameters"
    return None


def _rows(values: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """``values`` ``(K,)`` shaped to broadcast over ``like`` ``(K, ...)``."""
    return values.view(-1, *([1] * (like.dim() - 1)))


def _fresh_state(optimizer: torch.optim.Optimizer, param: torch.Tensor) -> dict[str, torch.Tensor]:
    """The state torch's SGD (momentum) or Adam starts ``param`` from, made before the first step so that a masked
    member's state can be kept as it was (a zero momentum buffer gives SGD's first step ``buf = grad`` exactly)."""
    if isinstance(optimizer, torch.optim.Adam):
        on_device = optimizer.defaults["capturable"]
        scalar = torch.float64 if torch.get_default_dtype() == torch.float64 else torch.float32
        state = {"step": torch.zeros((), dtype=scalar, device=param.device if on_device else "cpu"),
                 "exp_avg": torch.zeros_like(param), "exp_avg_sq": torch.zeros_like(param)}
        if optimizer.defaults["amsgrad"]:
            state["max_exp_avg_sq"] = torch.zeros_like(param)
        return state
    if isinstance(optimizer, torch.optim.SGD) and optimizer.defaults["momentum"]:
        return {"momentum_buffer": torch.zeros_like(param)}
    raise ValueError(f"a stacked region steps SGD with momentum or Adam, not {type(optimizer).__name__}")


class StackedWeights:
    """The parameters of K models with the same parameter names and shapes, held as one leaf ``(K, *shape)`` per
    name, and one optimizer over them of the members' own kind and settings.

    :meth:`step` is one optimizer step for every member: per-member gradient-norm clipping (torch's
    ``clip_grad_norm_`` formula on member k's gradients alone), then the optimizer's own step at learning rate 1,
    member k's update scaled by its learning rate ``lr[k]``: ``p_k <- p_k + lr_k (step_1(p)_k - p_k)``. That is
    member k's own SGD-with-momentum or Adam step exactly in real arithmetic (neither's state depends on the
    learning rate; their weight decay enters the gradient), a few ulps apart in floating point. A member that is
    not ``active`` keeps its parameters and optimizer state bit for bit. Raises ``ValueError`` for members whose
    optimizers stand at different steps (one shared step count) or another optimizer."""

    def __init__(self, models: Sequence[nn.Module], optimizers: Sequence[torch.optim.Optimizer]):
        self.names = [name for name, _ in models[0].named_parameters()]
        self.params = [torch.stack([m.get_parameter(n).detach() for m in models]).requires_grad_(True)
                       for n in self.names]
        for param in self.params:
            param.grad = torch.zeros_like(param)
        template = optimizers[0]
        options = {**template.defaults, "lr": 1.0}
        if "capturable" in options:
            options["capturable"] = self.params[0].device.type == "cuda"
        self.optimizer = type(template)(self.params, **options)
        self.lr = torch.ones(len(models), dtype=self.params[0].dtype, device=self.params[0].device)
        self.shared_lr = False
        for i, param in enumerate(self.params):
            own = [o.state.get(o.param_groups[0]["params"][i], {}) for o in optimizers]
            self.optimizer.state[param] = _fresh_state(self.optimizer, param) if not any(own) else self._stacked(own)

    def _stacked(self, own: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
        if not all(own):
            raise ValueError("some members' optimizers hold a state and others none (resumed and fresh members)")
        state = {}
        for key, first in own[0].items():
            if key == "step":  # a 0-dim parameter's moments are 0-dim too, and stack like any other
                steps = sorted({float(s[key]) for s in own})
                if len(steps) > 1:
                    raise ValueError(f"the members' optimizers stand at different steps {steps}")
                state[key] = first.detach().clone().to(self.params[0].device if self.optimizer.defaults.get(
                    "capturable") else "cpu")
            else:
                state[key] = torch.stack([s[key].detach() for s in own]).to(self.params[0].device)
        return state

    def bind(self, models: Sequence[nn.Module], optimizers: Sequence[torch.optim.Optimizer]) -> None:
        """Load the members' current weights and learning rates; their parameters become views of the stack."""
        self.load(models)
        with torch.no_grad():
            self.lr.copy_(torch.tensor([o.param_groups[0]["lr"] for o in optimizers], dtype=self.lr.dtype))
        rates = {o.param_groups[0]["lr"] for o in optimizers}
        # One learning rate for all (a cell's seeds, a regularizer grid) on the CPU: the optimizer steps at it, each
        # member's step then its own alone's bit for bit; else at 1, scaled per member (a few ulps apart), which a
        # CUDA graph replays with the learning rates of later epochs.
        self.shared_lr = len(rates) == 1 and self.lr.device.type == "cpu"
        self.optimizer.param_groups[0]["lr"] = rates.pop() if self.shared_lr else 1.0
        for k, model in enumerate(models):
            for name, param in zip(self.names, self.params, strict=True):
                own = model.get_parameter(name)
                own.data = param.data[k]
                own.grad = param.grad[k]  # type: ignore[index]

    def release(self, optimizers: Sequence[torch.optim.Optimizer]) -> None:
        """Give every member its own copy of its weights again and its optimizer state (for its checkpoints)."""
        for k, optimizer in enumerate(optimizers):
            optimizer._opt_called = True  # type: ignore[attr-defined]  # its step was the stack's: tell its scheduler
            for param, own in zip(self.params, optimizer.param_groups[0]["params"], strict=True):
                own.data, own.grad = own.data.clone(), None
                optimizer.state[own] = {key: value.detach().to("cpu").clone() if value.dim() == 0 else value[k].clone()
                                        for key, value in self.optimizer.state[param].items()}

    def load(self, models: Sequence[nn.Module]) -> None:
        """Copy the members' current weights into the stacked ones (their own, e.g. the selected epoch's)."""
        with torch.no_grad():
            for name, param in zip(self.names, self.params, strict=True):
                param.copy_(torch.stack([m.get_parameter(name).detach() for m in models]))

    def zero_grad(self) -> None:
        for param in self.params:
            param.grad.zero_()  # type: ignore[union-attr]

    @torch.no_grad()
    def step(self, active: torch.Tensor, max_norm: float | None) -> None:
        grads: list[torch.Tensor] = [param.grad for param in self.params]  # type: ignore[misc]
        if max_norm:
            # Each member's norm reduced as clip_grad_norm_ reduces its gradients alone: a row-wise reduction of the
            # stack sums in another order, an ulp that training amplifies tenfold per epoch (docs/protocol.md).
            norms = torch.stack([torch.stack([torch.linalg.vector_norm(row) for row in g]) for g in grads])
            coef = (max_norm / (torch.linalg.vector_norm(norms, dim=0) + 1e-6)).clamp(max=1.0)
            for g in grads:
                g.mul_(_rows(coef, g))
        before = [param.detach().clone() for param in self.params]
        states = [{k: v.clone() for k, v in self.optimizer.state[p].items()} for p in self.params]
        self.optimizer.step()
        anyone = active.any()
        for param, old, saved in zip(self.params, before, states, strict=True):
            stepped = param if self.shared_lr else old + _rows(self.lr, param) * (param - old)
            param.copy_(torch.where(_rows(active, param), stepped, old))
            for key, value in self.optimizer.state[param].items():
                value.copy_(torch.where(anyone if value.dim() == 0 else _rows(active, value), value, saved[key]))


def _clone(inputs: Inputs) -> Inputs:
    if isinstance(inputs, TimedInputs):
        return TimedInputs(_clone(inputs.inputs), inputs.final_index.clone())
    if isinstance(inputs, tuple):
        return tuple(_clone(i) for i in inputs)
    return inputs.clone()


def _copy(target: Inputs, source: Inputs) -> None:
    if isinstance(target, TimedInputs):
        _copy(target.inputs, source.inputs)  # type: ignore[union-attr]
        target.final_index.copy_(source.final_index)  # type: ignore[union-attr]
    elif isinstance(target, tuple):
        for t, s in zip(target, source, strict=True):  # type: ignore[arg-type]
            _copy(t, s)
    else:
        target.copy_(source)  # type: ignore[arg-type]


class StackRegion:
    """The training step of a stack's members as one region (see the module docstring); built for one set of
    members, which it keeps (a member whose loss turns non-finite is masked out, not removed) until the caller
    builds another. ``stack`` is a :class:`~ndebench.platform.worker.stack.Stack` (batched, not exact) and
    ``members`` its :class:`~ndebench.platform.worker.stack.Member` objects."""

    def __init__(self, stack: Any, members: Sequence[Any]):
        self.stack, self.members = stack, list(members)
        self.models = [m.built.model for m in members]
        self.optimizers = [m.training.optimizer for m in members]
        self.weights = StackedWeights(self.models, self.optimizers)
        device = self.weights.params[0].device
        self.active = torch.ones(len(members), dtype=torch.bool, device=device)
        self.sums = torch.zeros(len(members), dtype=torch.float64, device=device)
        self.graphs: dict[tuple[Any, ...], tuple[torch.cuda.CUDAGraph, Inputs, torch.Tensor]] = {}
        stack.model._graphs = GraphCache(inline=True)
        self.layers = {name: i for i, name in enumerate(self.weights.names)}
        self.pos_weights = [None if m.built.pos_weight is None else torch.tensor(m.built.pos_weight, device=device)
                            for m in members]
        self.eval_rngs: list[TrialRNG] | None = None

    def _latent(self, inputs: Inputs, rngs: Sequence[TrialRNG] | None = None) -> torch.Tensor:
        """``z(T)`` ``(K * B, H)`` from the stacked weights; training mode with the members' training generators,
        or evaluation mode drawing from ``rngs``."""
        for layer in self.stack.linears:
            if getattr(layer, "exact", False):  # each member's own layer, its weights views of the stack's
                layer.gather(self.models)
                continue
            layer.use(lambda p, name=layer.name: self._leaf(f"{name}.{p}"))
        generators = rngs or [m.training.rng for m in self.members]
        self.stack.rng.members = list(generators)
        self.stack.regularizer.members = [(m.built.model.regularizer, rng)
                                          for m, rng in zip(self.members, generators, strict=True)]
        self.stack.model.train(rngs is None)
        return self.stack.model.latent(inputs, self.stack.rng)

    def _leaf(self, name: str) -> torch.Tensor | None:
        index = self.layers.get(name)
        return None if index is None else self.weights.params[index]

    @torch.no_grad()
    def evaluate(self, split: str) -> list[tuple[dict[str, float], dict[str, Any]]]:
        """:meth:`~ndebench.platform.worker.stack.Stack.evaluate` of every member through the region: the members'
        current weights loaded into the stacked ones, each batch's N passes of every member (its ``n_mc``, the
        same for all) solved at once, each member's regularizer drawing from its own evaluation generator reset to
        its seed's stream (the same persistent generators on every call, as a captured graph needs). On CUDA the
        solve is captured once per batch shape; the heads and the metrics run eagerly on its output."""
        n = self.members[0].built.model.n_mc()
        self.weights.load(self.models)
        for model in self.models:
            model.eval()
        rngs = self._evaluation_rngs()
        feeds = [m.built.feeds[split].batches(m.built.batch_size, None) for m in self.members]
        predictions: list[list[tuple[Any, torch.Tensor]]] = [[] for _ in self.members]
        for batches in zip(*feeds, strict=True):
            z = self._solve(cat_inputs([repeat_batch(inputs, n) for inputs, _ in batches]), rngs)
            for mine, m, zk, (_, targets) in zip(predictions, self.members, z.chunk(len(self.members)), batches,
                                                 strict=True):
                mine.append((m.built.model.predict_from(zk.view(n, targets.shape[0], -1)), targets))
        return [score(m.built.model, mine, top5=m.built.top5) for m, mine in zip(self.members, predictions,
                                                                                  strict=True)]

    def _evaluation_rngs(self) -> list[TrialRNG]:
        device = self.active.device
        fresh = [TrialRNG.for_evaluation(m.spec.seed) for m in self.members]
        for rng in fresh:
            rng.regularizer_on(device)
        if self.eval_rngs is None:
            self.eval_rngs = fresh
        else:
            for rng, new in zip(self.eval_rngs, fresh, strict=True):
                rng.load_state(new.state())
        return self.eval_rngs

    def _solve(self, inputs: Inputs, rngs: list[TrialRNG]) -> torch.Tensor:
        if self.active.device.type != "cuda":
            return self._latent(inputs, rngs)
        key = ("eval", batch_size(inputs))
        if key not in self.graphs:
            static = _clone(inputs)
            generators = [rng.regularizer_on(self.active.device) for rng in rngs]
            graph = torch.cuda.CUDAGraph()
            for generator in generators:
                graph.register_generator_state(generator)
            states = [g.get_state() for g in generators]
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                self._latent(static, rngs)
            torch.cuda.current_stream().wait_stream(side)
            with torch.cuda.graph(graph):
                out = self._latent(static, rngs)
            torch.cuda.synchronize(self.active.device)
            for generator, state in zip(generators, states, strict=True):
                generator.set_state(state)
            self.graphs[key] = (graph, static, out)
        graph, static, out = self.graphs[key]
        _copy(static, inputs)
        graph.replay()
        return out.clone()

    def step(self, inputs: Inputs, targets: torch.Tensor) -> None:
        """One mini-batch of every member: ``inputs`` and ``targets`` ``(K * B, ...)`` member-major. A member whose
        loss is not finite leaves ``active`` (it takes no step, now or later); ``sums`` gains each active
        member's loss times B."""
        self.weights.zero_grad()
        z = self._latent(inputs)
        terms = []
        for member, zk, tk, weight in zip(self.members, z.chunk(len(self.members)), targets.chunk(len(self.members)),
                                          self.pos_weights, strict=True):
            with member.own_generator():
                logits = member.built.model.head(zk)
            terms.append(trial_loss(logits, tk, weight))
        losses = torch.stack(terms)
        self.active &= torch.isfinite(losses)
        losses.sum().backward()
        self.weights.step(self.active, self.members[0].training.cfg.grad_clip)
        self.sums += torch.where(self.active, losses.detach().double(), 0.0) * (targets.shape[0] // len(self.members))

    def replay(self, inputs: Inputs, targets: torch.Tensor) -> None:
        """:meth:`step`, captured once per batch shape on CUDA and replayed; run directly on the CPU."""
        if self.active.device.type != "cuda":
            self.step(inputs, targets)
            return
        key = (tuple(targets.shape),)
        if key not in self.graphs:
            self.graphs[key] = self._capture(inputs, targets)
        graph, static_inputs, static_targets = self.graphs[key]
        _copy(static_inputs, inputs)
        static_targets.copy_(targets)
        graph.replay()

    def _capture(self, inputs: Inputs, targets: torch.Tensor) -> tuple[torch.cuda.CUDAGraph, Inputs, torch.Tensor]:
        static_inputs, static_targets = _clone(inputs), targets.clone()
        generators = [t.rng.regularizer_on(self.active.device) for t in (m.training for m in self.members)]
        graph = torch.cuda.CUDAGraph()
        for generator in generators:
            graph.register_generator_state(generator)
        with self._unchanged(generators):
            active = self.active.clone()
            self.active.zero_()  # the warm-up steps update no weight
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                for _ in range(3):
                    self.step(static_inputs, static_targets)
            torch.cuda.current_stream().wait_stream(side)
            self.active.copy_(active)
            with torch.cuda.graph(graph):
                self.step(static_inputs, static_targets)
        return graph, static_inputs, static_targets

    @contextlib.contextmanager
    def _unchanged(self, generators: list[torch.Generator]) -> Iterator[None]:
        """Warm-up and capture leave the members' buffers (the heads' batch-norm statistics), loss sums and
        generators as they found them."""
        buffers = [{n: b.clone() for n, b in model.named_buffers()} for model in self.models]
        sums, states = self.sums.clone(), [g.get_state() for g in generators]
        cuda, cpu = torch.cuda.get_rng_state(self.active.device), [m.torch_state for m in self.members]
        yield
        torch.cuda.synchronize(self.active.device)
        with torch.no_grad():
            for model, saved in zip(self.models, buffers, strict=True):
                for name, buffer in model.named_buffers():
                    buffer.copy_(saved[name])
            self.sums.copy_(sums)
        for generator, state in zip(generators, states, strict=True):
            generator.set_state(state)
        torch.cuda.set_rng_state(cuda, self.active.device)
        for member, state in zip(self.members, cpu, strict=True):
            member.torch_state = state


class RegionEpochs:
    """A stack's training epochs as regions: one :class:`StackRegion` per set of running members, built anew
    (and captured anew on CUDA) when a member leaves the stack at the end of an epoch. Members whose optimizers
    stand at different steps (resumed from checkpoints of different epochs) train that epoch by ``eager`` (the
    batched eager stack's epoch), and ``note`` hears why once."""

    def __init__(self, stack: Any, eager: Callable[[list[Any]], dict[int, float | None]],
                 note: Callable[[str], None] | None = None):
        self.stack, self.eager, self.note = stack, eager, note
        self.region: StackRegion | None = None

    def __call__(self, members: list[Any]) -> dict[int, float | None]:
        if self.region is None or list(map(id, self.region.members)) != list(map(id, members)):
            try:
                self.region = StackRegion(self.stack, members)
            except ValueError as exc:
                if self.note is not None:
                    self.note(f"stack of {len(members)} trained as batched eager passes, not as one region: {exc}")
                    self.note = None
                return self.eager(members)
        return train_epoch(self.region)

    def evaluate(self, members: list[Any], split: str) -> list[tuple[dict[str, float], dict[str, Any]]]:
        """The members' evaluation on ``split`` through the region when they are its members and share their
        ``n_mc``, else the batched eager stack's (:meth:`~ndebench.platform.worker.stack.Stack.evaluate`)."""
        region = self.region
        if (region is None or list(map(id, region.members)) != list(map(id, members))
                or len({m.built.model.n_mc() for m in members}) > 1):
            return self.stack.evaluate(members, split)
        return region.evaluate(split)


def train_epoch(region: StackRegion) -> dict[int, float | None]:
    """One pass of every member of ``region`` over its own training batches (each member's batch order from its
    own shuffle generator); member id -> mean loss, or ``None`` for a member whose loss became non-finite."""
    members = region.members
    feeds = [m.built.feeds["train"].batches(m.built.batch_size, m.training.rng.shuffle) for m in members]
    for model in region.models:
        model.train()
    region.weights.bind(region.models, region.optimizers)
    region.active.fill_(True)
    region.sums.zero_()
    count = 0
    try:
        for batches in zip(*feeds, strict=True):
            region.replay(cat_inputs([b[0] for b in batches]), torch.cat([b[1] for b in batches]))
            count += batches[0][1].shape[0]
    finally:
        region.weights.release(region.optimizers)
    active, sums = region.active.tolist(), (region.sums / count).tolist()
    return {id(m): s if a else None for m, a, s in zip(members, active, sums, strict=True)}
