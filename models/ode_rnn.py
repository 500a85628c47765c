"""ODE-RNN (Rubanova et al., NeurIPS 2019) as in Kidger's baseline used by the torch-ists pipeline."""
from __future__ import annotations

from typing import Any, ClassVar

import torch
from ndebench.models.base import DataSpec, FieldMLP, Inputs, TimeSeriesNDE, split_readout
from ndebench.models.integrate import SolverConfig, TrialRNG, begin_pass, integrate, moved_times
from ndebench.models.registry import register_model
from ndebench.models.static import StaticInput
from ndebench.models.timeseries import Interpolation, control_path, spline_coefficients
from torch import nn


@register_model(
    "ode_rnn",
    display="ODE-RNN",
    summary="ODE-RNN: h evolves by an ODE between observations and jumps by a GRU cell at each observation",
    paper="Rubanova, Chen and Duvenaud, Latent ODEs for Irregularly-Sampled Time Series, NeurIPS 2019",
    family="ode",
)
class ODERNN(TimeSeriesNDE):
    """``h(t_0^-) = 0 [+ MLP(static)]``; at each grid time ``t_i``:
    ``h(t_i^-) = ODESolve(f, h(t_{i-1}), [t_{i-1}, t_i])``,
    then ``h(t_i) = GRUCell(u_i, h(t_i^-))`` for samples with an observation at ``t_i``; logits = head(h(T)), or
    head(h(t_f)) at each sample's final observation index ``f`` for :class:`TimedInputs`.

    ``f`` is ``Linear(H, H) -> Tanh -> ... -> Linear(H, H)`` (``num_layers`` hidden layers, no time input).
    With ``intensity=True`` (the pipeline's default for ODE-RNN) ``u_i = [dt_i, o_i, x_i]``: ``o_i`` the
    per-channel observation flags (the differences of the cumulative observation count, which the
    pipeline feeds as the intensity channel) and ``dt_i`` the time since the sample's last GRU update
    (the reference's accumulator never resets; this is the intended quantity); else ``u_i = x_i``.
    Missing values of ``x_i`` are read from the natural cubic spline through the observed points. Observations
    come from the data's own mask: with ``data.count_channels`` K (the OI intensity appended by the dataset,
    never missing) the flags of the K count channels are those of the value channels they count, so an hour
    without data is not an observation.

    Inputs (built once by :meth:`prepare`): ``(N, L, 2C)`` = ``[o, x]`` at the grid times, or the tuple
    ``(that, static (N, S))``; latent ``(B, H)``. Solver default: one Euler step per interval, adjoint,
    as in torch-ists. Regularizers act on the continuous evolution only: one draw spans the whole pass
    ``[t_0, T]`` (:func:`begin_pass`) and every interval's ``integrate`` call uses it; the GRU jumps are
    not modulated. A regularizer that moves the end time (STEER) to ``T'`` stops at ``T'``: observations
    after it are dropped, and past ``T`` the state evolves without observations on steps of the mean spacing.
    """

    default_solver: ClassVar[SolverConfig] = SolverConfig(method="euler", adjoint=True)

    def __init__(
        self, data: DataSpec, *, interpolation: Interpolation = "natural", intensity: bool = True, **common: Any
    ):
        super().__init__(data, **common)
        self.interpolation, self.intensity = interpolation, intensity
        self.count_channels = data.count_channels
        hidden_size, in_channels = self.hidden_size, self.in_channels
        self.static = StaticInput(self.static_channels, hidden_size)
        self.field = FieldMLP(hidden_size, hidden_size, hidden_size, self.num_layers, self.regularizer.field_layer,
                              nn.Tanh)
        self.cell = nn.GRUCell(1 + 2 * in_channels if intensity else in_channels, hidden_size)

    def prepare(self, times: torch.Tensor, values: torch.Tensor, static: torch.Tensor | None = None) -> Inputs:
        measured = values[..., : values.shape[-1] - self.count_channels]
        counts = (~torch.isnan(measured)).cumsum(1).to(values.dtype)
        flags = torch.cat([counts[:, :1], counts[:, 1:] - counts[:, :-1]], dim=1)
        flags = torch.cat([flags, flags[..., : self.count_channels]], dim=-1)
        coeffs = spline_coefficients(times, values, self.interpolation)
        filled = control_path(times, coeffs, self.interpolation).evaluate(times)
        return self.static.pack(torch.cat([flags, filled], dim=-1), static)

    def latent(self, inputs: Inputs, rng: TrialRNG) -> torch.Tensor:
        inputs, final = split_readout(inputs)
        features, static = self.static.unpack(inputs)
        flags, values = features.split(self.in_channels, dim=-1)
        times = self.times
        h = self.static(features.new_zeros(features.shape[0], self.hidden_size), static)
        draw = begin_pass(self.regularizer, h, times, solver=self.solver, rng=rng, piecewise=True)
        t0, t1 = float(times[0]), float(times[-1])
        end = self.regularizer.end_time(draw, t0, t1) if self.regularizer.active() else t1
        grid, observations = ((times, times.numel()) if end == t1
                              else (moved_times(times, end), int((times < end).sum())))
        if final is not None and end != t1:
            raise ValueError("reading each sample at its final observation needs a fixed end time (no STEER)")
        last_update = features.new_full((features.shape[0],), t0)
        read = h
        for i in range(grid.numel()):
            if i > 0:
                h = integrate(self.field, h, grid[i - 1 : i + 1], solver=self.solver, rng=rng,
                              regularizer=self.regularizer, draw=draw)
            if i < observations:
                observed = flags[:, i].amax(-1) > 0.5
                u = values[:, i]
                if self.intensity:
                    u = torch.cat([(times[i] - last_update).unsqueeze(-1), flags[:, i], u], dim=-1)
                h = torch.where(observed.unsqueeze(-1), self.cell(u, h), h)
                last_update = torch.where(observed, times[i], last_update)
            if final is not None:
                read = torch.where((final == i).unsqueeze(-1), h, read)
        return h if final is None else read
