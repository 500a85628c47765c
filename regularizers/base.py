"""The regularizer contract: per-forward-pass randomness plus vector-field wrapping.

A regularizer is an ``nn.Module`` owned by the model (so ``train()``/``eval()`` and ``state_dict`` reach it).
For each forward pass the model's ``integrate()`` call asks it to ``draw`` all randomness the pass needs
from the trial's ``torch.Generator``; the vector field is then modified by ``modulate`` as a deterministic
function of ``(t, z)`` and that draw. No random number is drawn inside the vector field, so adjoint
backward passes, Runge-Kutta stages and rejected steps that re-evaluate the field at the same ``t`` see the
same function.
"""
from __future__ import annotations

import bisect
import functools
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

import torch
from torch import nn

Role = Literal["drift", "diffusion"]
TestTime = Literal["deterministic", "mc"]
ControlScope = Literal["increment", "time"]


class StepClock:
    """The index of the fixed-grid step a solver is in, counted rather than looked up.

    :func:`ndebench.models.integrate.integrate` advances ``counted`` from torchdiffeq's step callbacks:
    forward steps count up from 0 (across the calls of a piecewise pass), adjoint backward steps count down
    from the last forward step; ``None`` where steps cannot be counted (torchsde, adaptive solvers, adjoint
    grids that do not line up with the forward grid). ``step`` is set to ``counted`` only while the field
    is being evaluated, so outside a solve a mask stays a pure function of ``t`` (looked up by time).
    """

    def __init__(self) -> None:
        self.step: int | None = None
        self.counted: int | None = None
        self._forward = 0
        self._backward = 0

    def forward_step(self) -> None:
        self.counted, self._forward, self._backward = self._forward, self._forward + 1, 0

    def backward_step(self) -> None:
        # A second backward pass over the same forward graph starts again from the last step.
        self._backward %= max(self._forward, 1)
        self.counted, self._backward = self._forward - 1 - self._backward, self._backward + 1

    def stop(self) -> None:
        self.counted = None


@dataclass(frozen=True)
class PassSpec:
    """What a regularizer needs to know to draw the randomness of one forward pass.

    ``batch_size`` B and ``latent_size`` H give the latent state shape ``(B, H)``; ``t0`` and ``t1`` the
    integration interval; ``grid`` the solver's step grid ``(S+1,)`` for fixed-step solvers (``None`` for
    adaptive ones); ``generator`` lives on ``device`` (the model's device), so draws need no transfer.
    """

    batch_size: int
    latent_size: int
    t0: float
    t1: float
    grid: torch.Tensor | None
    generator: torch.Generator
    device: torch.device
    dtype: torch.dtype
    step_tol: float = 0.0
    clock: StepClock = field(default_factory=StepClock, compare=False)

    @functools.cached_property
    def _boundaries(self) -> torch.Tensor:
        assert self.grid is not None
        return self.grid[1:-1] - self.step_tol

    @functools.cached_property
    def _boundary_list(self) -> list[float]:
        return self._boundaries.tolist()

    def step_index(self, t: torch.Tensor) -> int | torch.Tensor:
        """Index ``k`` of the solver step ``[grid[k], grid[k+1])`` that the evaluation time ``t`` belongs to.

        A step holds the mask of its left endpoint (App. G: ``Z(k+1) = Z(k) + gamma(Z(k)) dt o I_k``), so at
        an exact grid time ``t == grid[k]`` the index is ``k``: the largest ``k`` with ``grid[k] <= t``. ``t`` is
        compared in the grid's own dtype on every device (a float64 ``t`` against a float32 grid would otherwise
        fall just short of ``grid[k]`` on one device and not on the other).

        The step counted by ``clock`` (a Python int, free) when known; otherwise found by time: with a Python
        binary search for a CPU ``t``, else as a 0-dim tensor on the grid's device (no host synchronisation).
        torchdiffeq's fixed-grid solvers are run with
        ``perturb=True``, so a step's first stage arrives just after ``grid[k]`` and its last stage just
        before ``grid[k+1]``: every stage of step ``k`` maps to ``k``. torchsde accumulates its step times,
        so ``step_tol`` absorbs that rounding.
        """
        if self.clock.step is not None:
            return self.clock.step
        bounds = self._boundaries
        if t.device.type == "cpu":
            return bisect.bisect_right(self._boundary_list, float(t.detach().to(bounds.dtype)))
        return torch.searchsorted(bounds, t.reshape(1).to(device=bounds.device, dtype=bounds.dtype), right=True)[0]


class Regularizer(nn.Module):
    """Base class; as it stands it is the identity (registered as ``none``).

    Hooks, all optional:
      * ``draw(spec)`` -> per-pass randomness (any object) or ``None``;
      * ``modulate(draw, t, z, out, role)`` -> modified field output ``out`` of shape ``(B, H)``;
        ``role`` is ``"drift"`` (ODE right-hand side, CDE ``f(z) dX/dt``, SDE drift) or ``"diffusion"``;
      * ``end_time(draw, t0, t1)`` -> the end time of this pass's integration;
      * ``draw_stacked(members, specs)`` -> one draw for a stack's K members, or ``None`` (see the method);
      * ``step_mask(draw)`` -> the 0/1 per-step masks that ``modulate`` multiplies by, or ``None`` (see the method);
      * ``penalty()`` -> a scalar added to the training loss;
      * ``field_layer(num_features)`` -> a module ``(t, x) -> x`` that vector-field MLPs insert after each
        hidden linear layer, before the activation (``None``: nothing inserted); TA-BN puts its
        time-dependent batch norm here, naive drift dropout its per-pass unit mask;
      * ``head_dropout`` -> dropout probability on the classifier input (``None`` keeps the model's own).

    ``step_clock`` is the :class:`StepClock` of the latest pass (set by ``begin_pass``); ``PassSpec.step_index``
    reads it, so per-step draws need no search.

    ``control_scope`` says what a CDE's modulated drift is: ``"increment"``, the whole ``f(z) dX/dt`` (every
    channel of the control, the default), or ``"time"``, only the time channel's ``f_0(z) dX_0/dt`` (the
    data channels' increments are then integrated unmodulated). Models without a control path accept only
    ``"increment"``.

    ``test_time`` states the evaluation protocol, a fact of the class: ``"deterministic"`` (regularizer off in
    eval mode) or ``"mc"`` (kept on in eval mode). ``n_mc`` is the number of passes a prediction averages
    (Algorithm 1's N_MC), 1 unless the regularizer takes it as a hyperparameter. ``point_predictor`` names the
    predictor of the headline metrics: ``"mean_latent"`` (Algorithm 1, ``head(mean_j z_j(T))``) or
    ``"mc_probs"`` (the mean of the per-pass probabilities, for baselines whose source predicts that way).
    ``stack_blocker`` says why trials with this regularizer cannot be trained as one stacked model (``None``: they
    can, each member modulating its own rows through ``draw`` and ``modulate``); their stacks then train their
    members one after another.
    """

    test_time: ClassVar[TestTime] = "deterministic"
    control_scope: ControlScope = "increment"
    n_mc: int = 1
    point_predictor: ClassVar[Literal["mean_latent", "mc_probs"]] = "mean_latent"
    stochastic: ClassVar[bool] = False
    capturable: ClassVar[bool] = False
    head_dropout: float | None = None
    step_clock: StepClock | None = None
    stack_blocker: ClassVar[str | None] = None

    def active(self) -> bool:
        """Whether the latent-dynamics hooks apply in the current mode."""
        return self.training or self.test_time == "mc"

    def draw(self, spec: PassSpec) -> Any:
        return None

    def modulate(self, draw: Any, t: torch.Tensor, z: torch.Tensor, out: torch.Tensor, role: Role) -> torch.Tensor:
        return out

    def step_mask(self, draw: Any) -> torch.Tensor | None:
        """The 0/1 masks ``(S, B, H)`` (bool or the model's dtype) when ``modulate(draw, t, z, out, role)`` is
        ``out * mask[k]`` for every ``t`` of fixed-grid step ``k`` (``PassSpec.step_index``). An Euler step
        ``z + (mask[k] * dt_k) * f`` is then the modulated step ``z + dt_k * (f * mask[k])`` bit for bit (a product
        with 1 or 0 is exact), without an autograd node for the mask (:func:`~ndebench.models.euler.euler_final`).
        ``None`` (the default): no such masks.
        """
        return None

    def draw_stacked(self, members: Sequence[Regularizer], specs: Sequence[PassSpec]) -> Any:
        """One pass's draw for a stack's K members (``members[k]``, of this class, drawing from ``specs[k]``'s
        generator for its ``B`` rows) that ``modulate`` applies to their member-major ``(K * B, H)`` rows in one
        call, each row block exactly as member k's own draw and ``modulate`` would; ``None`` (the default): the
        stack draws and modulates member by member."""
        return None

    def end_time(self, draw: Any, t0: float, t1: float) -> float:
        return t1

    def penalty(self) -> torch.Tensor:
        return torch.zeros(())

    def field_layer(self, num_features: int) -> nn.Module | None:
        return None

    def graph_blocker(self) -> str | None:
        """Why a CUDA graph cannot hold a fixed-grid solve with this regularizer (``None``: it can). Capturable
        regularizers (``capturable``) draw all of a pass's randomness in ``draw`` as per-step tensors and
        modulate with tensor ops only; the others (random end times, per-step state updates, hooks in the field
        layers) run eagerly. The identity (this class itself) is capturable; a subclass says so itself."""
        if self.capturable or type(self) is Regularizer:
            return None
        return f"regularizer {type(self).__name__} is not capturable"

    def describe(self) -> dict[str, Any]:
        """The regularizer's protocol facts and hyperparameters, recorded on every trial run as the MLflow tags
        ``ndebench.regularizer.<key>`` (so a table never mixes protocols silently)."""
        return {"test_time": self.test_time, "stochastic": self.stochastic}
