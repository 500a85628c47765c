"""The regularizer contract: per-forward-pass randomness plus vector-field wrapping.

A regularizer is an ``nn.Module`` owned by the model (so ``train()``/``eval()`` and ``state_dict`` reach it).
For each forward pass the model's ``integrate()`` call asks it to ``draw`` all randomness the pass needs
from the trial's ``torch.Generator``; the vector field is then modified by ``modulate`` as a deterministic
function of ``(t, z)`` and that draw. No random number is drawn inside the vector field, so adjoint
backward passes, Runge-Kutta stages and rejected steps that re-evaluate the field at the same ``t`` see the
same function.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import torch
from torch import nn

Role = Literal["drift", "diffusion"]
TestTime = Literal["deterministic", "mc"]


@dataclass(frozen=True)
class PassSpec:
    """What a regularizer needs to know to draw the randomness of one forward pass.

    ``batch_size`` B and ``latent_size`` H give the latent state shape ``(B, H)``; ``t0`` and ``t1`` the
    integration interval; ``grid`` the solver's step grid ``(S+1,)`` for fixed-step solvers (``None`` for
    adaptive ones).
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

    def step_index(self, t: torch.Tensor) -> torch.Tensor:
        """Index ``k`` of the solver step ``[grid[k], grid[k+1])`` that the evaluation time ``t`` belongs to.

        torchdiffeq's fixed-grid solvers are run with ``perturb=True``, so a step's first stage arrives just
        after ``grid[k]`` and its last stage just before ``grid[k+1]``: every stage of step ``k`` maps to
        ``k``. torchsde accumulates its step times, so ``step_tol`` absorbs that rounding.
        """
        assert self.grid is not None
        k = torch.searchsorted(self.grid, t.reshape(1).to(self.grid.dtype) + self.step_tol, right=True) - 1
        return k.clamp(0, self.grid.numel() - 2)[0]


class Regularizer(nn.Module):
    """Base class; as it stands it is the identity (registered as ``none``).

    Hooks, all optional:
      * ``draw(spec)`` -> per-pass randomness (any object) or ``None``;
      * ``modulate(draw, t, z, out, role)`` -> modified field output ``out`` of shape ``(B, H)``;
        ``role`` is ``"drift"`` (ODE right-hand side, CDE ``f(z) dX/dt``, SDE drift) or ``"diffusion"``;
      * ``end_time(draw, t0, t1)`` -> the end time of this pass's integration;
      * ``penalty()`` -> a scalar added to the training loss;
      * ``field_layer(num_features)`` -> a module ``(t, x) -> x`` that vector-field MLPs insert after each
        hidden linear layer, before the activation (``None``: nothing inserted); TA-BN puts its
        time-dependent batch norm here, naive drift dropout its per-pass unit mask;
      * ``head_dropout`` -> dropout probability on the classifier input (``None`` keeps the model's own).

    ``test_time`` states the evaluation protocol: ``"deterministic"`` (regularizer off in eval mode) or
    ``"mc"`` (kept on in eval mode; predictions average ``n_mc`` passes). ``point_predictor`` names the
    predictor of the headline metrics: ``"mean_latent"`` (Algorithm 1, ``head(mean_j z_j(T))``) or
    ``"mc_probs"`` (the mean of the per-pass probabilities, for baselines whose source predicts that way).
    """

    test_time: ClassVar[TestTime] = "deterministic"
    point_predictor: ClassVar[Literal["mean_latent", "mc_probs"]] = "mean_latent"
    stochastic: ClassVar[bool] = False
    head_dropout: float | None = None

    def active(self) -> bool:
        """Whether the latent-dynamics hooks apply in the current mode."""
        return self.training or self.test_time == "mc"

    def draw(self, spec: PassSpec) -> Any:
        return None

    def modulate(self, draw: Any, t: torch.Tensor, z: torch.Tensor, out: torch.Tensor, role: Role) -> torch.Tensor:
        return out

    def end_time(self, draw: Any, t0: float, t1: float) -> float:
        return t1

    def penalty(self) -> torch.Tensor:
        return torch.zeros(())

    def field_layer(self, num_features: int) -> nn.Module | None:
        return None

    def describe(self) -> dict[str, Any]:
        """Protocol facts recorded with every run (so a table never mixes protocols silently)."""
        return {"test_time": self.test_time, "stochastic": self.stochastic}
