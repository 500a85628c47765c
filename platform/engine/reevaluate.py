"""``ndebench reevaluate``: re-score a study's trained evaluate runs with several numbers of Monte-Carlo
passes at test time, from their logged weights, without retraining (the paper's Tables 13-14, Fig. 4).

For every ``ok`` evaluate run whose regularizer stays on at test time (``test_time == "mc"``), the model is
rebuilt from the run's params (:meth:`TrialSpec.from_flat`, :func:`build_trial`), takes the logged
``model/state_dict.pt`` and is evaluated on the test split with ``n_mc`` passes for each requested value.
Each result is a new run tagged ``ndebench.phase=reevaluate``, ``ndebench.n_mc``, ``ndebench.source_run``
and the evaluate run's identity tags, under the evaluate run's parent run when it has one. A (source run,
n_mc) pair that already has an ``ok`` reevaluate run is skipped, so the command resumes.
"""
from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Callable, Sequence

import pandas as pd
from ndebench.datasets.files import resolve_data_dir
from ndebench.platform.common.weights import ARTIFACT, load_weights
from ndebench.platform.record import store, tracking
from ndebench.platform.record.runs import runs_frame
from ndebench.platform.worker.build import build_trial
from ndebench.platform.worker.evaluation import evaluate
from ndebench.platform.worker.spec import TrialSpec
from ndebench.regularizers.registry import create_regularizer

IDENTITY = ("study", "model", "dataset", "regularizer", "variant", "seed")
# The source run's param its cell's name is made of besides the values its cell fixes (common.labels.cell_label).
SCOPE = "regularizer.scope"


def parse_n_mc(text: str) -> list[int]:
    """``"1,3,5"`` -> ``[1, 3, 5]``; an error naming the bad entry unless every entry is an integer >= 1."""
    values = []
    for part in text.split(","):
        try:
            value = int(part)
        except ValueError:
            value = 0
        if value < 1 or str(value) != part.strip():
            raise ValueError(f"--n-mc entry {part!r} is not an integer >= 1; e.g. --n-mc 1,3,5,10,20")
        values.append(value)
    return sorted(set(values))


def reevaluate(uri: str, study: str, n_mc: Sequence[int], *, log: Callable[[str], None] = print,
               data_dir: str | None = None) -> list[str]:
    """Record a reevaluate run per (ok evaluate run with a Monte-Carlo test protocol, ``n_mc`` value) not yet
    recorded; return the new run ids. Runs without a test-time MC protocol are deterministic at any N_MC and
    are skipped, as are runs without logged weights or a resolved config in their params (counted in ``log``).
    The data come from ``data_dir`` (else ``$NDEBENCH_DATA_DIR`` or ``./data``), never from a run's
    ``data_dir`` param: whoever can write to the tracking store must not choose files this process reads."""
    from mlflow.entities import Metric, Param

    evaluated = runs_frame(uri, study, histories=False)
    if evaluated.empty:
        raise ValueError(f"study {study!r} has no evaluate-phase runs in {uri}; run the sweep first")
    have = {(r.source_run, r.n_mc) for r in _recorded(uri, study).itertuples()}
    client = store.client(uri)
    local_data = str(resolve_data_dir(data_dir))
    experiment_id = store.ensure_experiment(uri, study)
    created: list[str] = []
    skipped: defaultdict[str, list[str]] = defaultdict(list)
    for run in evaluated[evaluated["status"] == "ok"].itertuples(index=False):
        todo = [n for n in n_mc if (run.run_id, n) not in have]
        if not todo:
            continue
        if create_regularizer(run.regularizer).test_time != "mc":
            skipped[f"{run.regularizer} is deterministic at test time"].append(run.run_id)
            continue
        try:
            spec = dataclasses.replace(TrialSpec.from_flat(run.params), data_dir=local_data)
        except (KeyError, TypeError) as exc:
            skipped[f"params are not a resolved trial config (missing or wrong: {exc})"].append(run.run_id)
            continue
        built = build_trial(spec)
        try:
            built.model.load_state_dict(load_weights(client, run.run_id))
        except FileNotFoundError:
            skipped[f"no {ARTIFACT} artifact (weights logging off, or an older run)"].append(run.run_id)
            continue
        for n in todo:
            metrics, _ = evaluate(built.model, built.feeds["test"], built.batch_size, spec.seed, top5=built.top5,
                                  n_mc=n)
            tags = {f"{tracking.TAG}{k}": str(getattr(run, k)) for k in IDENTITY}
            tags |= {f"{tracking.TAG}phase": "reevaluate", f"{tracking.TAG}n_mc": str(n),
                     f"{tracking.TAG}status": "ok", f"{tracking.TAG}source_run": run.run_id,
                     f"{tracking.TAG}metric": built.metric_name}
            if run.parent_run_id:
                tags["mlflow.parentRunId"] = run.parent_run_id
            name = f"{run.label} s{run.seed} n_mc={n}"
            new = client.create_run(experiment_id, tags=tags, run_name=name).info.run_id
            # The fixed values as the frame read them, so a source run older than its param still names this one.
            naming = ({"fixed": run.fixed} if run.variant else {}) | ({SCOPE: run.params[SCOPE]}
                                                                     if SCOPE in run.params else {})
            client.log_batch(new, metrics=[Metric(f"test_{k}", float(v), 0, 0) for k, v in metrics.items()],
                             params=[Param(k, str(v)) for k, v in naming.items()])
            client.set_terminated(new, "FINISHED")
            created.append(new)
            log(f"[ndebench] {run.model} x {run.dataset} x {run.label} seed {run.seed}: n_mc={n} "
                + ", ".join(f"{k}={v:.4f}" for k, v in sorted(metrics.items())))
    for reason, ids in skipped.items():
        log(f"[ndebench] skipped {len(ids)} run(s): {reason} (e.g. {ids[0]})")
    return created


def _recorded(uri: str, study: str) -> pd.DataFrame:

    runs = tracking.search(uri, study, f"tags.`{tracking.TAG}phase` = 'reevaluate'")
    return pd.DataFrame([{"source_run": r.data.tags.get(f"{tracking.TAG}source_run"),
                          "n_mc": int(r.data.tags.get(f"{tracking.TAG}n_mc", "0"))} for r in runs
                         if r.data.tags.get(f"{tracking.TAG}status") == "ok"], columns=["source_run", "n_mc"])
