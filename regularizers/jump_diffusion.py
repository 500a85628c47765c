"""Jump-diffusion "dropout" (Liu et al. 2020): multiplicative Rademacher jumps of the state at each solver step."""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
from ndebench.regularizers import checks
from ndebench.regularizers.base import PassSpec, Regularizer, Role
from ndebench.regularizers.catalog import BUILTINS
from ndebench.regularizers.registry import register_regularizer

if TYPE_CHECKING:
    from ndebench.models.registry import ModelInfo


@dataclass
class Jumps:
    """Per-step jumps of one pass: ``signs[k]`` ``(B, H)`` in {-1, 0, +1} (``Z * dN``), ``dt[k]`` the step length."""

    signs: torch.Tensor
    dt: torch.Tensor
    size: float
    spec: PassSpec


@dataclass
class Drops:
    """Per-step keep masks of one pass: ``keep[k]`` ``(B, H)`` in {0, 1}, 0 with probability p at every step."""

    keep: torch.Tensor
    spec: PassSpec


def _fixed_grid(spec: PassSpec) -> torch.Tensor:
    if spec.grid is None:
        raise ValueError("jump diffusion needs a fixed-step solver (euler, midpoint, heun2, heun3, rk4), not adaptive")
    return (spec.grid[1:] - spec.grid[:-1]).to(torch.float64)


def sample_jumps(spec: PassSpec, rate: float, size: float) -> Jumps:
    """``Z * dN`` for every step ``k`` of the pass's fixed grid: ``dN ~ Bernoulli(rate dt_k)``, ``Z`` Rademacher.

    One uniform ``u`` per (step, sample, unit) gives both: a jump with ``Z = -1`` if ``u < q/2``, with
    ``Z = +1`` if ``q/2 <= u < q`` (``q = rate dt_k``). Drawn step by step from ``spec.generator`` so the
    uniforms take ``O(B H)`` memory; the int8 result ``(S, B, H)`` is built on the generator's device.
    """
    dt = _fixed_grid(spec)
    probs = rate * dt
    if bool((probs > 1.0).any()):
        raise ValueError(
            f"jump rate {rate} times the largest step {float(dt.max())} exceeds 1; lower the rate or the step size"
        )
    signs = torch.empty(dt.numel(), spec.batch_size, spec.latent_size, dtype=torch.int8, device=spec.generator.device)
    for k, q in enumerate(probs.tolist()):
        u = torch.rand(spec.batch_size, spec.latent_size, generator=spec.generator, device=spec.generator.device)
        signs[k] = (u < q).to(torch.int8) - 2 * (u < q / 2).to(torch.int8)
    return Jumps(signs.to(spec.device), dt.to(spec.device, spec.dtype), size, spec)


def sample_drops(spec: PassSpec, p: float) -> Drops:
    """``xi_k`` for every step ``k`` of the pass's fixed grid: per (sample, unit), 0 with probability ``p``
    whatever the step length (App. G.1's discrete form ``Z(k+1) = Z(k) + gamma(Z(k)) o xi``)."""
    steps = _fixed_grid(spec).numel()
    u = torch.rand(steps, spec.batch_size, spec.latent_size, generator=spec.generator, device=spec.generator.device)
    return Drops((u >= p).to(device=spec.device, dtype=spec.dtype), spec)


def not_on_sde(model: ModelInfo) -> str | None:
    """Jump diffusion's compatibility predicate: every SDE model, built-in or registered later, is refused."""
    if model.family != "sde":
        return None
    return ("jump diffusion is defined for ODE-type models only; in SDE models the diffusion network dominates the "
            "jump term, so the paper does not pair them (Continuum Dropout paper, Appendix G 'Universal "
            "Applicability')")


@register_regularizer(
    "jump_diffusion",
    display="Jump Diffusion",
    summary="Jump diffusion (Liu et al.'s repo): z -> z + size*z*Z*Bernoulli(rate*dt) per step; "
            "paper's p = rate (scale: per_step, App. G.1's per-step drop); off at test",
    hyperparams=BUILTINS["jump_diffusion"].hyperparams,
    incompatible=not_on_sde,
    requires_fixed_step=True,
)
class JumpDiffusion(Regularizer):
    """``z_{k+1} = z_k + f(t_k, z_k) dt_k + size * z_k * Z_k * dN_k`` on the solver's fixed grid.

    As in ``xuanqing94/NeuralSDE`` (``PoissonBernoulliJump``, ``noise_type='dropout'``): per element and per
    step, ``dN_k ~ Bernoulli(rate dt_k)`` and a Rademacher sign ``Z_k``, so with ``scale = 1`` a jumping unit
    becomes ``0`` or ``2 z``; the jump has mean zero and acts on the state, not on the field. The jumps of
    all steps are drawn once per pass (``(S, B, H)``) and enter the drift at step ``k`` as
    ``size * J_k * z / dt_k``: an Euler step then gives exactly the update above. With a higher-order
    solver the stages of step ``k`` all see ``J_k``, so the jump is integrated across the step
    (for ``f = 0`` the factor ``1 + J`` becomes a truncated ``exp(J)``); Euler reproduces the original.
    Off in eval mode (deterministic test protocol); see ``jump_diffusion_ttn`` for test-time noise.

    How the paper's dropout rate maps here: App. D.1 tunes "p" over ``1e-5 ... 0.5`` for a pipeline built
    from Liu et al.'s repository; in that code the tuned knob is ``drop_rate`` (the Poisson rate), so the
    grid is applied to ``rate``, with ``size = 1`` (the repo's default) fixed. This is NOT the model the
    paper writes down in App. G.1, ``dz = 1/2 gamma dt + 1/2 gamma o Xi dN`` with ``P(Xi = -1) = p``: there
    the jump acts on the field ``gamma`` and p is the probability that a jump is a drop; here it acts on
    the state ``z`` with a symmetric sign, as in the repository the paper says it followed (``scale="rate"``,
    the default; ``size`` is the jump size, 1 in the repository).

    ``scale="per_step"`` is the paper's own discrete form instead (App. G.1, Eq. liu_discrete2):
    ``z_{k+1} = z_k + f(t_k, z_k) dt_k o xi_k`` with ``P(xi = 0) = rate`` per unit and step, whatever the
    step length, so the tuned p means the same on every dataset; under ``"rate"`` the expected number of jumps
    per unit is ``rate (T - t0)``: at most 0.5 over a UEA pass (T = 1) and 80 over a Speech one (T = 160).
    """

    stochastic = True

    def __init__(self, rate: float = 0.01, scale: str = "rate", size: float = 1.0):
        super().__init__()
        problem = checks.jump_scale(scale)
        if problem:
            raise ValueError(f"scale={scale!r} {problem}")
        if scale == "per_step" and not 0.0 < rate < 1.0:
            raise ValueError(f"rate={rate!r} is a per-step drop probability under scale='per_step': "
                             "it must lie in (0, 1)")
        self.rate, self.scale, self.size = float(rate), scale, float(size)

    def draw(self, spec: PassSpec) -> Jumps | Drops:
        return sample_drops(spec, self.rate) if self.scale == "per_step" else sample_jumps(spec, self.rate, self.size)

    def modulate(self, draw: Jumps | Drops, t: torch.Tensor, z: torch.Tensor, out: torch.Tensor,
                 role: Role) -> torch.Tensor:
        if role != "drift":
            return out
        k = draw.spec.step_index(t)
        if isinstance(draw, Drops):
            return out * draw.keep[k]
        return out + (draw.size * draw.signs[k].to(z.dtype)) * z / draw.dt[k]

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "rate": self.rate, "scale": self.scale, "size": self.size}


@register_regularizer(
    "jump_diffusion_ttn",
    display="Jump Diffusion + TTN",
    summary="Jump diffusion kept on at test time (TTN): label, top-5 and AUROC from the softmax "
            "averaged over n_mc passes",
    hyperparams=BUILTINS["jump_diffusion_ttn"].hyperparams,
    incompatible=not_on_sde,
    requires_fixed_step=True,
)
class JumpDiffusionTTN(JumpDiffusion):
    """:class:`JumpDiffusion` with its noise on in eval mode too ("TTN" in the Continuum Dropout paper).

    Liu et al.'s evaluation never switches the jumps off and averages the softmax probabilities of
    ``n_ensemble`` stochastic passes (``nonadv_evaluation.py``); following that source, every metric of
    this regularizer, the headline ones included, comes from the MC predictive distribution
    (``point_predictor = "mc_probs"``), not from Algorithm 1's ``head(mean z(T))``.
    """

    test_time = "mc"
    point_predictor = "mc_probs"

    def __init__(self, rate: float = 0.01, scale: str = "rate", size: float = 1.0, n_mc: int = 5):
        super().__init__(rate, scale, size)
        self.n_mc = int(n_mc)

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "n_mc": self.n_mc}
