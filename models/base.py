"""Shared pieces of every NDE classifier: the reference classifier head and Monte-Carlo prediction."""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Literal, NamedTuple

import torch
from ndebench.models.graphs import CAPTURED, CaptureError, GraphCache, graph_decision
from ndebench.models.integrate import SolverConfig, TrialRNG, family_methods, integrate
from ndebench.regularizers.base import Regularizer
from torch import nn

Family = Literal["ode", "cde", "sde"]


@dataclass(frozen=True)
class DataSpec:
    """What a model is told of its data, filled once from the dataset (the platform's ``trial.data_spec``).

    ``in_channels`` C (values per time point, or image channels); ``num_classes`` K; ``binary``: one logit
    (a binary task) instead of K; ``times`` ``(L,)`` the common observation grid of a time-series set
    (``None`` for images); ``image_size`` ``(H, W)`` of an image set (``None`` for time series);
    ``static_channels`` S, the time-invariant features per sample (0: none); ``count_channels`` K, the last K
    input channels being observation counts of the first K (never missing; 0: none).
    """

    in_channels: int
    num_classes: int
    binary: bool = False
    times: torch.Tensor | None = None
    image_size: tuple[int, int] | None = None
    static_channels: int = 0
    count_channels: int = 0


class TimedInputs(NamedTuple):
    """A model's prepared ``inputs`` plus each sample's ``final_index`` ``(N,)`` int64: the index into the
    model's ``times`` of the sample's last observation, where its latent is read (per-stay lengths, e.g.
    Sepsis) instead of at ``times[-1]``."""

    inputs: Inputs
    final_index: torch.Tensor


Inputs = torch.Tensor | tuple[torch.Tensor, ...] | TimedInputs


def batch_size(inputs: Inputs) -> int:
    if isinstance(inputs, TimedInputs):
        return int(inputs.final_index.shape[0])
    return int((inputs[0] if isinstance(inputs, tuple) else inputs).shape[0])


def index_batch(inputs: Inputs, index: torch.Tensor | slice) -> Inputs:
    """Rows ``index`` of every tensor in ``inputs``."""
    if isinstance(inputs, TimedInputs):
        return TimedInputs(index_batch(inputs.inputs, index), inputs.final_index[index])
    return tuple(x[index] for x in inputs) if isinstance(inputs, tuple) else inputs[index]


def repeat_batch(inputs: Inputs, n: int) -> Inputs:
    """``n`` copies stacked along the batch dimension: row ``j * B + b`` is sample ``b`` of pass ``j``."""
    if isinstance(inputs, TimedInputs):
        return TimedInputs(repeat_batch(inputs.inputs, n), inputs.final_index.repeat(n))
    if isinstance(inputs, tuple):
        return tuple(repeat_batch(x, n) for x in inputs)
    return inputs.repeat(n, *([1] * (inputs.dim() - 1)))


def inputs_to(inputs: Inputs, device: torch.device) -> Inputs:
    """``inputs`` with every tensor moved to ``device``."""
    if isinstance(inputs, TimedInputs):
        return TimedInputs(inputs_to(inputs.inputs, device), inputs.final_index.to(device))
    return tuple(x.to(device) for x in inputs) if isinstance(inputs, tuple) else inputs.to(device)


def cat_inputs(parts: Sequence[Inputs]) -> Inputs:
    """Several batches concatenated along the batch dimension, in order (a stack's members, member-major)."""
    first = parts[0]
    if isinstance(first, TimedInputs):
        return TimedInputs(cat_inputs([p.inputs for p in parts]), torch.cat([p.final_index for p in parts]))
    if isinstance(first, tuple):
        return tuple(cat_inputs([p[i] for p in parts]) for i in range(len(first)))
    return torch.cat(list(parts))


def split_readout(inputs: Inputs) -> tuple[Inputs, torch.Tensor | None]:
    """``(model inputs, final_index or None)``; with an index a model solves with ``output="times"`` and
    reads its latent with :func:`read_at`."""
    return (inputs.inputs, inputs.final_index) if isinstance(inputs, TimedInputs) else (inputs, None)


def readout_output(final_index: torch.Tensor | None) -> Literal["final", "times"]:
    """The ``integrate`` output a model needs: the whole path when it reads each sample at its own index."""
    return "final" if final_index is None else "times"


def read_at(path: torch.Tensor, final_index: torch.Tensor | None) -> torch.Tensor:
    """``z(T)`` ``(B, H)`` from ``integrate``'s output: as is for ``final_index=None``, else
    ``path[final_index[b], b]`` of the path ``(L, B, H)`` at the model's times (the reference pipelines'
    gather at each sample's final time)."""
    if final_index is None:
        return path
    return path[final_index.to(path.device), torch.arange(path.shape[1], device=path.device)]


@dataclass
class Prediction:
    """Output of :meth:`NDEClassifier.predict` for a batch of B inputs, K outputs, H latent components.

    ``logits`` ``(B, K)``: the head applied to the MC mean of ``z(T)`` (Algorithm 1); ``probs`` ``(B, K)``:
    the MC predictive distribution (mean over passes of the per-pass softmax, or sigmoid for K = 1);
    ``z_mean`` and ``z_var`` ``(B, H)``: MC mean and unbiased per-component variance of ``z(T)`` (zero
    variance for a single pass).
    """

    logits: torch.Tensor
    probs: torch.Tensor
    z_mean: torch.Tensor
    z_var: torch.Tensor


class ClassifierHead(nn.Module):
    """``Linear(h,h) -> BatchNorm1d -> ReLU -> Dropout(p) -> Linear(h,K)`` as in the torch-ists pipeline.

    Xavier-uniform weights and bias 0.01; the last layer's gradients are multiplied by ``grad_scale``
    (100 in the reference pipeline) through tensor hooks.
    """

    def __init__(self, hidden_size: int, num_outputs: int, dropout: float = 0.1, grad_scale: float = 100.0):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(hidden_size, hidden_size), nn.BatchNorm1d(hidden_size), nn.ReLU(), nn.Dropout(dropout),
            nn.Linear(hidden_size, num_outputs),
        )
        for layer in (self.net[0], self.net[4]):
            nn.init.xavier_uniform_(layer.weight)
            nn.init.constant_(layer.bias, 0.01)
        if grad_scale != 1.0:
            for param in self.net[4].parameters():
                param.register_hook(lambda grad: grad * grad_scale)

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        return self.net(z)


def mlp(in_size: int, hidden_size: int, out_size: int, num_layers: int,
        activation: type[nn.Module] = nn.ReLU) -> nn.Sequential:
    """``Linear(in, h) -> act -> (num_layers - 1) x [Linear(h, h) -> act] -> Linear(h, out)`` (no time input)."""
    layers: list[nn.Module] = [nn.Linear(in_size, hidden_size), activation()]
    for _ in range(num_layers - 1):
        layers += [nn.Linear(hidden_size, hidden_size), activation()]
    layers.append(nn.Linear(hidden_size, out_size))
    return nn.Sequential(*layers)


class FieldMLP(nn.Module):
    """Vector-field MLP ``(t, x) -> y``: ``num_layers`` x [Linear -> norm(t, .) -> act], then ``Linear(h, out)``.

    ``norm`` comes from the model's regularizer (``Regularizer.field_layer``, e.g. TA-BN's time-dependent
    batch norm); with ``None`` the norms are the identity and this equals :func:`mlp`.
    """

    def __init__(
        self,
        in_size: int,
        hidden_size: int,
        out_size: int,
        num_layers: int,
        norm: Callable[[int], nn.Module | None] | None = None,
        activation: type[nn.Module] = nn.ReLU,
    ):
        super().__init__()
        sizes = [in_size] + [hidden_size] * num_layers
        self.linears = nn.ModuleList(nn.Linear(a, b) for a, b in zip(sizes[:-1], sizes[1:], strict=True))
        norms = [norm(hidden_size) if norm is not None else None for _ in range(num_layers)]
        self.norms = nn.ModuleList(n if n is not None else nn.Identity() for n in norms)
        self.timed = [n is not None for n in norms]
        self.activation = activation()
        self.out = nn.Linear(hidden_size, out_size)

    def forward(self, t: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        for linear, norm, timed in zip(self.linears, self.norms, self.timed, strict=True):
            x = linear(x)
            x = norm(t, x) if timed else x
            x = self.activation(x)
        return self.out(x)


class NDEClassifier(nn.Module):
    """Base class: an encoder gives ``z(0)``, a latent NDE gives ``z(T)``, a head gives logits.

    Subclasses implement ``prepare(times, values, static=None) -> inputs`` (run once per split; inputs are
    a tensor or a tuple of tensors whose first dimension is the sample dimension) and
    ``latent(inputs, rng) -> z(T)`` of shape ``(B, H)`` (which calls
    :func:`ndebench.models.integrate.integrate`). Time-series inputs may come wrapped in :class:`TimedInputs`
    (per-sample final observation indices): ``latent`` then returns ``z`` at each sample's own final time
    (:func:`split_readout`, :func:`readout_output`, :func:`read_at`). Image models take image batches directly.

    A model is built as ``cls(data, regularizer, solver, **hyperparameters)``: ``data`` a :class:`DataSpec`,
    ``regularizer`` ``None`` for the identity, ``solver`` ``None`` for the class's ``default_solver``; its
    hyperparameters are its constructors' keyword-only parameters (``models.registry.model_options``), here
    the latent size ``hidden_size`` H and the vector fields' hidden layers ``num_layers``.
    ``family`` (``ode``, ``cde``, ``sde``) and ``field_layers`` (whether the vector fields insert the
    regularizer's ``field_layer``s) are what regularizers decide compatibility by; ``register_model``
    declares them. ``head_dropout`` is the head's dropout rate unless the regularizer sets one;
    ``head_grad_scale`` multiplies the head's last-layer gradients (100 in the time-series pipeline).
    """

    family: ClassVar[Family]
    field_layers: ClassVar[bool] = True
    default_solver: ClassVar[SolverConfig] = SolverConfig()
    head_dropout: ClassVar[float] = 0.1
    head_grad_scale: ClassVar[float] = 100.0
    graph_blocker: ClassVar[str | None] = "only time-series ODE solves are captured"
    # The methods whose captured pass this class (not a subclass) compared equal to the eager one on a real GPU:
    # the only ones ``solver.cuda_graph: auto`` captures.
    graph_verified: ClassVar[tuple[str, ...]] = ()

    def __init__(
        self,
        data: DataSpec,
        regularizer: Regularizer | None = None,
        solver: SolverConfig | None = None,
        *,
        hidden_size: int = 32,
        num_layers: int = 1,
    ):
        super().__init__()
        self.hidden_size, self.num_layers = hidden_size, num_layers
        self.regularizer = regularizer if regularizer is not None else Regularizer()
        self.solver = solver if solver is not None else self.default_solver
        valid = family_methods(self.family)
        if self.solver.method not in valid:
            raise ValueError(f"{type(self).__name__}: solver method {self.solver.method!r} does not solve "
                             f"{self.family.upper()}s; valid: {', '.join(valid)}")
        if self.regularizer.control_scope != "increment" and self.family != "cde":
            raise ValueError(f"{type(self).__name__}: regularizer scope={self.regularizer.control_scope!r} (ndebench's "
                             "extension, not the paper's method) applies to CDE models only (it names a control "
                             "channel); valid here: 'increment'")
        num_outputs = 1 if data.binary else data.num_classes
        dropout = self.regularizer.head_dropout if self.regularizer.head_dropout is not None else self.head_dropout
        self.head = ClassifierHead(hidden_size, num_outputs, dropout, self.head_grad_scale)
        self.mc_chunk: int | None = None
        self._graph_notes: dict[str, str] = {}
        self._graphs = GraphCache()

    def prepare(self, times: torch.Tensor, values: torch.Tensor, static: torch.Tensor | None = None) -> Inputs:
        raise NotImplementedError

    def graph_note(self, device: torch.device | str) -> str:
        """``"captured"`` or ``"eager: <reason>"``: whether this model's training solves on ``device`` replay a
        CUDA graph (:func:`~ndebench.models.graphs.graph_decision`), or why not; a capture that failed says so."""
        key = torch.device(device).type
        if key not in self._graph_notes:
            solver = self.solver
            self._graph_notes[key] = graph_decision(
                setting=solver.cuda_graph, device=device, method=solver.method, adjoint=solver.adjoint,
                step_size=solver.step_size, kind="sde" if self.family == "sde" else "ode",
                model_blocker=self.graph_blocker, regularizer_blocker=self.regularizer.graph_blocker(),
                verified=type(self).__dict__.get("graph_verified", ()))
        return self._graph_notes[key]

    def latent(self, inputs: Inputs, rng: TrialRNG) -> torch.Tensor:
        raise NotImplementedError

    def forward(self, inputs: Inputs, rng: TrialRNG) -> torch.Tensor:
        """One stochastic (training) or deterministic pass: logits ``(B, K)``."""
        return self.head(self.latent(inputs, rng))

    def penalty(self) -> torch.Tensor:
        return self.regularizer.penalty()

    @property
    def stochastic_latent(self) -> bool:
        """Whether ``z(T)`` is random even with the regularizer off: an SDE, whose Brownian noise stays on at test."""
        return self.family == "sde"

    def n_mc(self) -> int:
        """Passes per prediction in eval mode: the regularizer's declared ``n_mc`` (1 unless it takes one)."""
        return self.regularizer.n_mc

    @torch.no_grad()
    def predict(self, inputs: Inputs, rng: TrialRNG, n_mc: int | None = None,
                passes_per_chunk: int | None = None) -> Prediction:
        """Algorithm 1's test phase, batched: ``n_mc`` passes of the inputs stacked along the batch dimension.

        All passes run as one batch of ``n_mc * B`` rows (on a GPU, N passes cost about one), split into
        chunks of ``passes_per_chunk`` passes when given. When the device runs out of memory the chunk is
        halved and the prediction retried; the chunk that fitted is kept for later calls. Chunking changes
        only how the passes are grouped: each pass still draws its own randomness from ``rng``.
        """
        n = n_mc or self.n_mc()
        batch = batch_size(inputs)
        chunk = requested = min(n, passes_per_chunk or self.mc_chunk or n)
        while True:
            try:
                z = torch.cat([self.latent(repeat_batch(inputs, c), rng).view(c, batch, -1) for c in _chunks(n, chunk)])
                break
            except torch.OutOfMemoryError:
                if chunk == 1:
                    raise
                chunk = (chunk + 1) // 2
                if torch.cuda.is_available():
                    torch.cuda.empty_cache()
        if chunk < requested:
            self.mc_chunk = chunk
        return self.predict_from(z)

    @torch.no_grad()
    def predict_from(self, z: torch.Tensor) -> Prediction:
        """The :class:`Prediction` of the latents ``z`` ``(N, B, H)`` of N passes over a batch of B (what
        :meth:`predict` computes after its passes; a stacked evaluation computes ``z`` of several models at once)."""
        n, batch = z.shape[:2]
        z_mean = z.mean(0)
        z_var = z.var(0) if n > 1 else torch.zeros_like(z_mean)
        per_pass = self.head(z.reshape(n * batch, -1)).view(n, batch, -1)
        probs = torch.sigmoid(per_pass) if per_pass.shape[-1] == 1 else torch.softmax(per_pass, -1)
        return Prediction(logits=self.head(z_mean), probs=probs.mean(0), z_mean=z_mean, z_var=z_var)


class TimeSeriesNDE(NDEClassifier):
    """Base of the time-series classifiers: what every one of them shares.

    It keeps ``data.times`` ``(L,)`` as the ``times`` buffer (moved with the model) and the input channels C
    and static channels S of ``data``; :meth:`solve` runs the latent dynamics over ``times``. A subclass
    states only what differs, as the SDE variants of ``snsde.py`` do: its own keyword-only hyperparameters
    (the common ones go on as ``**common``), its ``default_solver`` and the modules it builds, created after
    the head in a fixed order (so a seed gives the same initial weights).
    """

    graph_blocker: ClassVar[str | None] = "its vector field reads per-batch data (control path or observations)"

    def __init__(self, data: DataSpec, **common: Any):
        if data.times is None:
            raise ValueError(f"{type(self).__name__} is a time-series model: its DataSpec needs the observation "
                             "times (L,)")
        super().__init__(data, **common)
        self.register_buffer("times", data.times.clone())
        self.in_channels, self.static_channels = data.in_channels, data.static_channels

    def solve(self, field: nn.Module, z0: torch.Tensor, final: torch.Tensor | None, rng: TrialRNG,
              **options: Any) -> torch.Tensor:
        """``z(T)`` ``(B, H)``: :func:`~ndebench.models.integrate.integrate` of ``field`` from ``z0`` ``(B, H)``
        over the model's ``times`` with its solver and regularizer (``options``: ``control``, ``diffusion``,
        ``regularized``), read at each sample's ``final`` index when given (:func:`read_at`)."""
        note = self.graph_note(z0.device)
        graphs = self._graphs if note == CAPTURED or self._graphs.inline else None
        # a failed capture must not cost the trial any random draws: the eager retry draws what it would have
        before = rng.state() if graphs is not None and not graphs.inline else None
        try:
            path = integrate(field, z0, self.times, solver=self.solver, rng=rng, regularizer=self.regularizer,
                             output=readout_output(final), graphs=graphs, **options)
        except CaptureError as exc:
            self._graph_notes[z0.device.type] = f"eager: capture failed: {exc}"
            rng.load_state(before)
            return self.solve(field, z0, final, rng, **options)
        return read_at(path, final)


def _chunks(total: int, size: int) -> list[int]:
    """``total`` split into parts of ``size`` (the last one smaller)."""
    return [min(size, total - start) for start in range(0, total, size)]
