"""The plan of a sweep in words: what `ndebench validate` and `ndebench run` print before anything runs."""
from __future__ import annotations

from ndebench.platform.spec.plan import plan_stages, sweep_cells
from ndebench.platform.spec.sweepspec import SweepSpec

LISTED_CELLS = 12


def describe_spec(spec: SweepSpec) -> str:
    """The plan of a sweep as `validate` and `run` print it: cells, each stage's trials and searched keys, total."""
    cells = sweep_cells(spec)
    variants = sum(1 for c in cells if c.variant)
    lines = [f"study {spec.study!r}, protocol {spec.protocol}: {len(cells)} cell(s) = {len(spec.models)} model(s) x "
             f"{len(spec.datasets)} dataset(s) x {len(spec.regularizers)} regularizer(s)"
             + (f" + {variants} fixed-parameter variant cell(s)" if variants else "")]
    for stage in plan_stages(spec):
        tc = stage.tune
        how = {"tpe": f"TPE, {tc.n_startup_trials} random start-up", "random": "random",
               "grid": "full grid"}[tc.sampler]
        how += ", ASHA" if tc.scheduler == "asha" else ""
        searched = [c for c in stage.cells if c.budget]
        if not searched:
            lines.append(f"stage {stage.name}: nothing to search"
                         + (" (model and training fixed)" if stage.name == "base" else ""))
            continue
        lines.append(f"stage {stage.name} ({how}): {stage.trials} trial(s) over {len(searched)} cell(s)")
        for c in searched[:LISTED_CELLS]:
            lines.append(f"  {c.label}: {c.budget} trial(s) [{', '.join(sorted(c.space))}]")
        if len(searched) > LISTED_CELLS:
            lines.append(f"  ... and {len(searched) - LISTED_CELLS} more cell(s)")
    seeds = list(spec.evaluate.seeds)
    lines.append(f"stage evaluate: {len(cells) * len(seeds)} trial(s) = {len(cells)} cell(s) x seeds {seeds}")
    lines.append(f"total: {total_trials(spec)} trial(s)")
    return "\n".join(lines)


def total_trials(spec: SweepSpec) -> int:
    """Every trial the plan holds: the search stages' budgets and the evaluate stage's cells x seeds."""
    return sum(stage.trials for stage in plan_stages(spec)) + len(sweep_cells(spec)) * len(spec.evaluate.seeds)
