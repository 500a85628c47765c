"""A forest plot of each cell's difference from ``none``: the picture of a study's answer.

One row per tested cell (model, dataset, regularizer) of a table: the difference of its mean from ``none``'s,
``mean_r - mean_none``, as a point with the 95% confidence interval of the table's test as a bar, a line at 0
and the test's p-value at the right; significant cells (the table's markers) are drawn filled. Saved as PNG
(``report.html``) and PDF (papers).
"""
from __future__ import annotations

import math
from pathlib import Path

from matplotlib.figure import Figure
from ndebench.platform.report.render.figures import save_png_pdf
from ndebench.platform.report.render.latex import display
from ndebench.platform.report.render.tables import LABELS, SHORT_TESTS, Table, fmt_p
from ndebench.platform.report.statistics import stats
from ndebench.regularizers.none import BASELINE


def forest_figure(table: Table, path: Path) -> Path | None:
    """The forest plot of ``table``'s comparisons with ``none`` at ``path`` (and its PDF beside it); None when
    the table has no comparison with a finite difference."""
    rows = table.comparisons.sort_values(list(stats.CELL), ascending=False)
    rows = rows[[math.isfinite(float(d)) for d in rows["difference"]]]
    if rows.empty:
        return None
    fig = Figure(figsize=(7.0, 1.2 + 0.42 * len(rows)))
    ax = fig.add_subplot()
    for y, row in enumerate(rows.itertuples(index=False)):
        low, high = float(row.diff_ci_low), float(row.diff_ci_high)
        significant = bool(str(getattr(row, "marker", "") or ""))
        if math.isfinite(low) and math.isfinite(high):
            ax.plot([low, high], [y, y], color="tab:blue", linewidth=2)
        ax.plot(row.difference, y, "o", color="tab:blue", markerfacecolor="tab:blue" if significant else "white",
                markersize=7)
        ax.annotate(f"p = {fmt_p(float(row.p))}", xy=(1.01, y), xycoords=("axes fraction", "data"), va="center",
                    fontsize="small")
    ax.axvline(0.0, color="black", linewidth=0.8, linestyle="--")
    ax.set_yticks(range(len(rows)), [f"{table.names.get(r.regularizer, display(r.regularizer))} "
                                     f"({display(r.model)}, {display(r.dataset)})"
                                     for r in rows.itertuples(index=False)])
    ax.set_ylim(-0.7, len(rows) - 0.3)
    metric = table.metric_label()
    ax.set_xlabel(f"test {metric}: difference from {display(BASELINE)} (95% CI)")
    ax.set_title(f"{SHORT_TESTS[table.test]} against {display(BASELINE)}; filled: significant", fontsize="medium")
    fig.tight_layout()
    return save_png_pdf(fig, path, bbox_inches="tight")


def forest_figures(tables: list[Table], directory: Path) -> list[Path]:
    """A forest plot per table (``forest_<metric>.png`` and ``.pdf``); the PNG paths."""
    paths = []
    for table in tables:
        name = "forest_" + ("primary" if table.title == "primary" else LABELS.get(table.metric_names()[0],
                                                                               table.title).lower())
        found = forest_figure(table, directory / f"{name.replace(' ', '-')}.png")
        paths += [found] if found else []
    return paths
