"""Sample paths of Continuum Dropout (the paper's Figs. 2 and 10): the indicator I(t) of the alternating
renewal process and a latent component that pauses while I(t) = 0.

The latent follows the rotation field ``dz/dt = I(t) * omega * J z`` with ``z(0) = (1, 0)``, so its first
component is exactly ``cos(omega * A(t))`` with ``A(t) = int_0^t I(s) ds`` the active time: it moves as the
undropped ``cos(omega t)`` while active and stays flat while dropped.
"""
from __future__ import annotations

import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from matplotlib.figure import Figure
from ndebench.platform.report.render.figures import save_pdf
from ndebench.platform.report.render.sections import save_figure
from ndebench.regularizers.continuum_dropout import sample_renewal_paths
from ndebench.regularizers.rates import solve_rates


@dataclass(frozen=True)
class Trajectories:
    """``times`` (G,), ``indicator`` and ``latent`` (n_paths, G) of one (p, m) on [0, T]."""

    p: float
    m: float
    times: np.ndarray
    indicator: np.ndarray
    latent: np.ndarray
    omega: float


def parse_floats(text: str, option: str) -> list[float]:
    """``"0.1,0.5"`` -> ``[0.1, 0.5]``; an error naming ``option`` and the bad entry otherwise."""
    try:
        return [float(part) for part in text.split(",")]
    except ValueError:
        raise ValueError(f"{option} {text!r} must be comma-separated numbers, e.g. {option} 0.1,0.5") from None


def sample_trajectories(p: float, m: float, T: float = 1.0, *, n_paths: int = 3, seed: int = 0,
                        points: int = 2001, turns: float = 2.0) -> Trajectories:
    """Draw ``n_paths`` renewal paths with the rates of (p, m, T) (``solve_rates``), evaluate ``I(t)`` on
    ``points`` times and the paused latent ``cos(omega A(t))``, ``omega = 2 pi turns / T``; ``A`` is exact
    from the switching times (:meth:`RenewalPaths.active_time`)."""
    rates = solve_rates(p, m, T)
    generator = torch.Generator().manual_seed(seed)
    paths = sample_renewal_paths(n_paths, 1, rates, 0.0, T, generator, dtype=torch.float64)
    times = torch.linspace(0.0, T, points, dtype=torch.float64)
    indicator = paths.indicator(times)[:, :, 0].T.numpy()
    active = torch.stack([paths.active_time(t)[:, 0] for t in times], dim=1).numpy()
    omega = 2 * math.pi * turns / T
    return Trajectories(p, m, times.numpy(), indicator, np.cos(omega * active), omega)


def trajectory_figure(pairs: list[tuple[float, float]], path: Path, T: float = 1.0, *, n_paths: int = 3,
                      seed: int = 0) -> list[Path]:
    """One column per (p, m): sample paths of I(t) (top, offset for legibility) and of the paused latent
    component with the undropped path dashed (bottom). Saved as ``path`` and a PDF beside it."""
    fig = Figure(figsize=(3.2 * len(pairs), 4.6))
    axes = fig.subplots(2, len(pairs), squeeze=False, sharex=True)
    for j, (p, m) in enumerate(pairs):
        tr = sample_trajectories(p, m, T, n_paths=n_paths, seed=seed)
        top, bottom = axes[0, j], axes[1, j]
        for i in range(n_paths):
            colour = f"C{i}"
            top.step(tr.times, tr.indicator[i] + 1.5 * i, where="post", color=colour, linewidth=1)
            bottom.plot(tr.times, tr.latent[i], color=colour, linewidth=1)
        bottom.plot(tr.times, np.cos(tr.omega * tr.times), color="black", linestyle="--", linewidth=1,
                    label="no dropout")
        top.set_yticks([1.5 * i + 0.5 for i in range(n_paths)], [f"path {i + 1}" for i in range(n_paths)],
                       fontsize="x-small")
        top.set_title(f"p = {p:g}, m = {m:g}", fontsize="medium")
        bottom.set_xlabel("t")
        if j == 0:
            top.set_ylabel("I(t)")
            bottom.set_ylabel("z(t), paused when I = 0")
            bottom.legend(fontsize="x-small", loc="lower left")
    fig.tight_layout()
    path = Path(path)
    if path.suffix.lower() == ".pdf":
        return [save_pdf(fig, path, bbox_inches="tight")]
    return save_figure(fig, path)


def plot_rate_paths(args: Any) -> list[Path]:
    """``ndebench rates --plot FILE``: :func:`trajectory_figure` of every (p, m) of ``--plot-p`` x ``--plot-m``
    (default ``--p`` and ``--m``), ``--paths`` paths each over ``[0, --T]``; says where it wrote them (on stderr
    under ``--json``)."""
    if args.paths < 1:
        raise ValueError(f"--paths {args.paths} must be >= 1")
    ps = parse_floats(args.plot_p, "--plot-p") if args.plot_p else [args.p]
    ms = parse_floats(args.plot_m, "--plot-m") if args.plot_m else [args.m]
    written = trajectory_figure([(p, m) for p in ps for m in ms], Path(args.plot), args.T, n_paths=args.paths,
                                seed=args.seed)
    print(f"sample paths written to {', '.join(map(str, written))}", file=sys.stderr if args.json else sys.stdout)
    return written
