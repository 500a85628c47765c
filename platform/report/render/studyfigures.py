"""The figures of a study report, as jobs for :func:`~ndebench.platform.report.render.drawing.draw`.

Per (model, dataset) pair: a reliability diagram of the pooled calibration bins of each regularizer, a
per-seed plot of the primary metric and the learning curves; per model: a critical-difference diagram where
its Friedman gate passes. Which of them are drawn is the report's figure mode
(:mod:`~ndebench.platform.report.render.drawing`).
"""
from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

import pandas as pd
from ndebench.platform.common.metrics import merge_calibration_bins
from ndebench.platform.report.render import figures
from ndebench.platform.report.render.drawing import Job, draw
from ndebench.platform.report.render.tables import LABELS, regularizer_order
from ndebench.platform.report.statistics import stats
from ndebench.platform.report.statistics.rows import cell_columns, row_names


def pooled_calibration(runs: pd.DataFrame) -> list[dict[str, Any]]:
    """Per cell (its row named ``regularizer``): the calibration bins of its ``ok`` runs summed (``n_runs`` of
    them)."""
    if "calibration" not in runs.columns:
        return []
    ok = runs[(runs["status"] == "ok") & runs["calibration"].map(lambda c: isinstance(c, dict))]
    cells: dict[tuple[str, str, str], list[dict]] = {}
    for *key, bins in zip(*(ok[c].tolist() for c in cell_columns(ok)), ok["calibration"].tolist(), strict=True):
        cells.setdefault(tuple(key), []).append(bins)
    return [{"model": m, "dataset": d, "regularizer": r, "n_runs": len(bins), "bins": merge_calibration_bins(bins)}
            for (m, d, r), bins in sorted(cells.items())]


def slug(*parts: str) -> str:
    """A file-name part from names (``uea/GunPoint`` -> ``uea-GunPoint``)."""
    return "_".join(re.sub(r"[^A-Za-z0-9.-]+", "-", p) for p in parts)


def pair_figure_inputs(runs: pd.DataFrame, primary: dict[str, str]) -> list[tuple[str, str, tuple, tuple]]:
    """Per (model, dataset) pair: ``(model, dataset, reliability, seeds)``, the arguments of
    :func:`~ndebench.platform.report.render.figures.reliability_figure` (``()`` without calibration bins) and of
    :func:`~ndebench.platform.report.render.figures.seed_figure`."""
    out = []
    calibration = {(c["model"], c["dataset"], c["regularizer"]): c["bins"] for c in pooled_calibration(runs)}
    order = regularizer_order(runs)
    for (model, dataset), group in runs.groupby(["model", "dataset"], sort=True):
        names = [r for r in order if r in set(row_names(group))]
        curves = {r: calibration[(model, dataset, r)] for r in names if (model, dataset, r) in calibration}
        metric = primary[dataset]
        ok = group[(group["status"] == "ok")]
        values = pd.DataFrame({"regularizer": row_names(ok), "value": ok[metric].astype(float)}).dropna()
        unfinished = group[group["status"] != "ok"]
        failed = {r: ", ".join(f"{len(g2)} {s}" for s, g2 in g.groupby("status"))
                  for r, g in unfinished.groupby(row_names(unfinished))}
        out.append((model, dataset, (curves, f"{model} on {dataset}") if curves else (),
                    (values, names, f"{model} on {dataset}: one point per seed", f"test {LABELS.get(metric, metric)}",
                     failed)))
    return out


def pair_jobs(runs: pd.DataFrame, primary: dict[str, str], directory: Path) -> list[Job]:
    """The reliability diagram and per-seed plot of every (model, dataset) pair."""
    jobs: list[Job] = []
    for model, dataset, reliability, seeds in pair_figure_inputs(runs, primary):
        if reliability:
            curves, title = reliability
            jobs.append((figures.reliability_diagram,
                         (curves, directory / f"reliability_{slug(model, dataset)}.png", title)))
        values, names, title, ylabel, failed = seeds
        jobs.append((figures.seed_plot,
                     (values, names, directory / f"seeds_{slug(model, dataset)}.png", title, ylabel, failed)))
    return jobs


def model_jobs(runs: pd.DataFrame, primary: dict[str, str], directory: Path, alpha: float,
               gates: dict[str, tuple[bool, str]]) -> list[Job]:
    """The critical-difference diagram of every model whose gate passes."""
    jobs: list[Job] = []
    for model, group in runs.groupby("model", sort=True):
        if not gates[model][0]:
            continue
        datasets = {d: primary[d] for d in sorted(set(group["dataset"]))}
        ranks = stats.average_ranks(group, datasets, model)
        pairs = stats.pairwise_wilcoxon(group, datasets, model, alpha)
        jobs.append((figures.critical_difference_diagram,
                     (ranks, pairs, alpha, directory / f"cd_{slug(model)}.png",
                      f"{model} over {len(datasets)} datasets")))
    return jobs


def learning_jobs(runs: pd.DataFrame, mean: pd.DataFrame, check: pd.DataFrame, directory: Path) -> list[Job]:
    """A learning-curve figure per (model, dataset) pair in ``mean`` (the mean curves per cell and epoch,
    :func:`~ndebench.platform.report.learning.mean_curves`)."""
    chance = check.drop_duplicates(["model", "dataset"]).set_index(["model", "dataset"])["chance"]
    flagged = {k: set(g["regularizer"]) for k, g in check[check["learned"].eq(False)].groupby(["model", "dataset"])}
    order = regularizer_order(runs)
    return [(figures.learning_curve_figure,
             (part, order, directory / f"learning_{slug(model, dataset)}.png", curve_title(model, dataset, part),
              float(chance.get((model, dataset), math.nan)), flagged.get((model, dataset), set())))
            for (model, dataset), part in mean.groupby(["model", "dataset"], sort=True)]


def curve_title(model: str, dataset: str, mean: pd.DataFrame) -> str:
    """The learning figure's title, true to the ``n`` runs :func:`~ndebench.platform.report.learning.mean_curves`
    averaged per (regularizer, epoch): one seed per regularizer (the report reads the lowest ``ok`` seed's curves,
    :func:`~ndebench.platform.report.learning.curve_runs`), else the mean over up to that many seeds."""
    most = int(mean["n"].max()) if len(mean) else 1
    return (f"{model} on {dataset}: loss per epoch of one seed per regularizer (its lowest ok seed)" if most == 1
            else f"{model} on {dataset}: mean loss per epoch over up to {most} seeds")


def study_figures(runs: pd.DataFrame, primary: dict[str, str], directory: Path, alpha: float,
                  gates: dict[str, tuple[bool, str]], mode: str, curves: pd.DataFrame | None,
                  check: pd.DataFrame) -> list[Path]:
    """Draw the figures of ``mode`` (``all``, ``summary`` or ``none``), per-pair ones in parallel when many;
    ``curves``: the mean learning curves (:func:`~ndebench.platform.report.learning.mean_curves`), if read."""
    if mode == "none":
        return []
    jobs = pair_jobs(runs, primary, directory) if mode == "all" else []
    jobs += model_jobs(runs, primary, directory, alpha, gates)
    if curves is not None and not curves.empty:
        jobs += learning_jobs(runs, curves, check, directory)
    return draw(jobs)
