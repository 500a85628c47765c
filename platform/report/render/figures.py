"""PNG figures of a report: reliability diagrams, per-seed box/strip plots, critical-difference diagrams.

Each figure is saved as PNG and, beside it, as PDF. Figures are built on ``matplotlib.figure.Figure``
rather than pyplot so no global backend or figure state is touched (reports may be written from a process that
already uses matplotlib).
"""
from __future__ import annotations

import math
import textwrap
from pathlib import Path
from typing import Any

import matplotlib
import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from ndebench.platform.common.metrics import expected_calibration_error
from ndebench.platform.report.statistics.learned import FLAG

# TrueType (Type 42) fonts embedded in PDF and PostScript: the submission checks of IEEE PDF eXpress and ACM refuse
# matplotlib's default Type 3 fonts.
PAPER_FONTS = {"pdf.fonttype": 42, "ps.fonttype": 42}


def save_png_pdf(fig: Figure, path: Path, **kwargs: Any) -> Path:
    """Save ``path`` (PNG, for reports) and a PDF copy beside it (vector with TrueType fonts, for papers);
    return ``path``."""
    fig.savefig(path, dpi=120, **kwargs)
    save_pdf(fig, Path(path).with_suffix(".pdf"), **kwargs)
    return path


def save_pdf(fig: Figure, path: Path, **kwargs: Any) -> Path:
    """Save ``fig`` as the PDF ``path`` with TrueType (Type 42) fonts, which journals accept and Type 3 they do not;
    return ``path``."""
    with matplotlib.rc_context(PAPER_FONTS):
        fig.savefig(path, **kwargs)
    return path


def reliability_diagram(curves: dict[str, dict[str, Any]], path: Path, title: str) -> Path:
    """:func:`reliability_figure` saved to ``path`` (and a PDF beside it)."""
    return save_png_pdf(reliability_figure(curves, title), path)


def reliability_figure(curves: dict[str, dict[str, Any]], title: str) -> Figure:
    """One curve per regularizer of bin accuracy ``correct_sum/count`` against mean confidence
    ``confidence_sum/count`` over the non-empty bins of pooled
    :func:`~ndebench.platform.common.metrics.calibration_bins`
    output; the diagonal is perfect calibration and the legend gives each curve's pooled ECE."""
    fig = Figure(figsize=(4.8, 4.4))
    ax = fig.add_subplot()
    ax.plot([0, 1], [0, 1], color="0.6", linestyle="--", linewidth=1, label="perfect calibration")
    for name, bins in curves.items():
        count = np.asarray(bins["count"], dtype=float)
        used = count > 0
        confidence = np.asarray(bins["confidence_sum"], dtype=float)[used] / count[used]
        accuracy = np.asarray(bins["correct_sum"], dtype=float)[used] / count[used]
        ax.plot(confidence, accuracy, marker="o", markersize=4,
                label=f"{name} (ECE {expected_calibration_error(bins):.3f})")
    ax.set(xlim=(0, 1), ylim=(0, 1), xlabel="confidence", ylabel="accuracy", title=title)
    ax.legend(fontsize="small", loc="upper left")
    fig.tight_layout()
    return fig


def seed_plot(values: pd.DataFrame, order: list[str], path: Path, title: str, ylabel: str,
              failed: dict[str, str] | None = None) -> Path:
    """:func:`seed_figure` saved to ``path`` (and a PDF beside it)."""
    return save_png_pdf(seed_figure(values, order, title, ylabel, failed), path)


def seed_figure(values: pd.DataFrame, order: list[str], title: str, ylabel: str,
                failed: dict[str, str] | None = None) -> Figure:
    """Box plot per regularizer (in ``order``) of ``values["value"]`` with every seed drawn as a point;
    ``failed`` describes the diverged/errored runs of a regularizer (e.g. "1 diverged"), written under its name."""
    fig = Figure(figsize=(max(4.8, 1.2 + 1.1 * len(order)), 4.0))
    ax = fig.add_subplot()
    samples = [values.loc[values["regularizer"] == name, "value"].to_numpy(float) for name in order]
    positions = np.arange(1, len(order) + 1)
    non_empty = [i for i, s in enumerate(samples) if len(s)]
    if non_empty:
        ax.boxplot([samples[i] for i in non_empty], positions=positions[non_empty], widths=0.5, showfliers=False)
    for position, sample in zip(positions, samples, strict=True):
        offsets = np.linspace(-0.12, 0.12, len(sample)) if len(sample) > 1 else np.zeros(len(sample))
        ax.scatter(position + offsets, sample, s=16, zorder=3)
    failed = failed or {}
    labels = [name + (f"\n({failed[name]})" if failed.get(name) else "") for name in order]
    ax.set_xticks(positions, labels, rotation=20, fontsize="small")
    ax.set(ylabel=ylabel)
    ax.set_title(textwrap.fill(title, 48), fontsize="medium")
    fig.tight_layout()
    return fig


def critical_difference_diagram(ranks: pd.Series, pairs: pd.DataFrame, alpha: float, path: Path, title: str) -> Path:
    """Average ranks (1 = best) on a horizontal axis, drawn by ``scikit_posthocs.critical_difference_diagram``; a
    bar joins methods whose pairwise Holm-adjusted Wilcoxon p-value (``pairs`` from
    :func:`~ndebench.platform.report.statistics.stats.pairwise_wilcoxon`, columns ``a, b, p_holm``) is at least
    ``alpha``, i.e. that the data cannot tell apart."""
    import scikit_posthocs

    names = list(ranks.index)
    matrix = pd.DataFrame(1.0, index=names, columns=names)
    for a, b, p in pairs[["a", "b", "p_holm"]].itertuples(index=False):
        if a in matrix.index and b in matrix.index:
            matrix.loc[a, b] = matrix.loc[b, a] = 1.0 if np.isnan(p) else float(p)
    fig = Figure(figsize=(1.6 + 0.9 * len(names), 1.0 + 0.28 * len(names)))
    ax = fig.add_subplot()
    scikit_posthocs.critical_difference_diagram(ranks, matrix, alpha=alpha, ax=ax,
                                                label_fmt_left="{label} ({rank:.2f})",
                                                label_fmt_right="({rank:.2f}) {label}",
                                                label_props={"fontsize": "small"},
                                                crossbar_props={"color": "tab:red", "linewidth": 2.5})
    ax.set_title(f"{title}\naverage rank (1 = best); bars: Holm-adjusted Wilcoxon p >= {alpha:g}",
                 fontsize="small", pad=18)
    return save_png_pdf(fig, path, bbox_inches="tight")


def learning_curve_figure(mean: pd.DataFrame, order: list[str], path: Path, title: str,
                          chance: float = math.nan, flagged: set[str] | None = None) -> Path:
    """Mean training (solid) and validation (dashed) loss per epoch (``n`` the runs averaged), one colour per
    regularizer in ``order``, the y label saying over how many seeds, the chance level ``ln K`` as a grey line;
    regularizers in ``flagged`` are marked "did not learn"."""
    fig = Figure(figsize=(6.0, 4.0))
    ax = fig.add_subplot()
    for i, name in enumerate(order):
        part = mean[mean["regularizer"] == name]
        if part.empty:
            continue
        colour = f"C{i % 10}"
        label = name + (f" ({FLAG})" if flagged and name in flagged else "")
        ax.plot(part["epoch"], part["train_loss"], color=colour, label=f"{label}: train")
        if np.isfinite(part["val_loss"].to_numpy(float)).any():
            ax.plot(part["epoch"], part["val_loss"], color=colour, linestyle="--", label=f"{name}: validation")
    if math.isfinite(chance):
        ax.axhline(chance, color="0.5", linewidth=1, label=f"chance ln K = {chance:.3f}")
    most = int(mean["n"].max()) if "n" in mean and len(mean) else 1
    ax.set(xlabel="epoch", ylabel="loss (one seed per regularizer)" if most == 1 else
           f"loss (mean over up to {most} seeds)")
    ax.set_title(textwrap.fill(title, 60), fontsize="medium")
    ax.legend(fontsize="x-small")
    fig.tight_layout()
    return save_png_pdf(fig, path)
