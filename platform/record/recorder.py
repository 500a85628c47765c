"""One trial as one MLflow run: its tags, its params (the resolved config), its per-epoch and final metrics, its
result, every write fenced by the driver's lease."""
from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from ndebench.platform.record.lease.fence import Fence, fenced
from ndebench.platform.record.lease.heartbeat import interval_s, stale_s
from ndebench.platform.record.schema import PARENT, RESULT_LEASE, RESUMABLE_STATUSES, TAG, mlflow_end
from ndebench.platform.record.standard_tags import standard_tags
from ndebench.platform.record.store import client, ensure_experiment, retry
from ndebench.platform.record.summaries import RESULTS_DIGEST, UNFINISHED, digest_of
from ndebench.platform.record.tracking import run_name, run_status, search


def trial_run_tags(tags: dict[str, str], config_hash: str, parent_run_id: str | None) -> dict[str, str]:
    """The MLflow tags a trial run starts with: ``ndebench.<key>`` for ``tags``, its config hash, status
    ``running``, kind ``trial``, the standard provenance tags and the parent run."""
    all_tags = {f"{TAG}{k}": str(v) for k, v in tags.items()} | {f"{TAG}config_hash": config_hash,
                                                                 f"{TAG}status": "running", f"{TAG}kind": "trial"}
    return all_tags | standard_tags(tags.get("git_commit")) | ({PARENT: parent_run_id} if parent_run_id else {})


class TrialRecorder:
    """Records one trial as one MLflow run: tags, params (the resolved config), per-epoch and final metrics.

    An evaluate trial re-run after a crash (same study and config hash, run still ``running``), or a search
    trial retried by Ray (same trial folder), continues the same MLflow run instead of adding a duplicate, as
    does any trial given the ``run_id`` of its checkpoint (``reattached``; ``previous_tags`` are that run's
    tags before this attempt). A trial of a driver holding a lease (tag ``lease``, its epoch; ``lease_experiment``,
    the experiment of its take) checks that the lease is still the newest (:attr:`check`) before it makes anything
    and before each write, and never continues a run of a newer driver.
    """

    def __init__(self, uri: str, study: str, config: dict[str, Any], config_hash: str, tags: dict[str, str],
                 parent_run_id: str | None = None, run_id: str | None = None):
        from mlflow.entities import Param, RunTag

        lease = int(tags.get("lease") or 0)
        self.lease = lease
        taken_in = tags.get("lease_experiment")
        self.check: Callable[..., None] = (Fence(client(uri), study, lease, tags.get("lease_id", ""),
                                                 max_age_s=interval_s(stale_s()), experiment_id=taken_in).check
                                           if lease else lambda fresh=False: None)
        self.client = fenced(client(uri), self.check if lease else None)
        # Before anything is made: a trial of a driver whose study's experiment was renamed must not create an
        # empty experiment of the old name.
        self.check(fresh=True)
        experiment_id = taken_in or ensure_experiment(uri, study)
        all_tags = trial_run_tags(tags, config_hash, parent_run_id)
        # An evaluate trial (one per cell and seed) is unique by its config, even across drivers; a search
        # stage may try a config twice, so its trial is found by its Ray trial folder (a retry after its
        # worker died before the first checkpoint), or named by a resumed driver (``run_id``). Only a run cut
        # off (running or interrupted) is continued: an errored or diverged attempt stays as it ended.
        same = (f"tags.`{TAG}config_hash` = '{config_hash}'" if tags["phase"] == "evaluate"
                else f"tags.`{TAG}trial_dir` = '{tags['trial_dir']}'" if tags.get("trial_dir") else "")
        existing = [
            r for r in search(uri, study, f"{same} and tags.`{TAG}phase` = '{tags['phase']}'")
            if run_status(r) in RESUMABLE_STATUSES and int(r.data.tags.get(f"{TAG}lease") or 0) <= lease
        ] if same and run_id is None else []
        if run_id is not None:
            existing = [retry(lambda: self.client.get_run(run_id))]
        self.reattached = bool(existing)
        self.previous_tags: dict[str, str] = dict(existing[0].data.tags) if existing else {}
        # The keys with a per-epoch history (an earlier attempt's included): a final value under one of them
        # would add a false point to it.
        self.history_keys: set[str] = set(existing[0].data.metrics) if existing else set()
        if existing:
            self.run_id = existing[0].info.run_id
            retry(lambda: self.client.update_run(self.run_id, status="RUNNING"))
        else:
            run = retry(lambda: self.client.create_run(experiment_id, tags=all_tags, run_name=run_name(
                {**config, "regularizer": tags["regularizer"], "phase": tags["phase"], "seed": tags["seed"]})))
            self.run_id = run.info.run_id
            params = [Param(k, str(v)) for k, v in sorted(config.items())]
            retry(lambda: self.client.log_batch(self.run_id, params=params))
        # A continued run holds no digest until it ends again (its status and lease tags change meanwhile).
        started = all_tags | ({f"{TAG}{RESULTS_DIGEST}": UNFINISHED} if existing else {})
        retry(lambda: self.client.log_batch(self.run_id, tags=[RunTag(k, v) for k, v in started.items()]))

    def set_tags(self, tags: dict[str, str]) -> None:
        """Set ``ndebench.<key>`` tags on the run."""
        from mlflow.entities import RunTag

        retry(lambda: self.client.log_batch(self.run_id, tags=[RunTag(f"{TAG}{k}", str(v)) for k, v in tags.items()]))

    def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None:
        """Log ``metrics`` at ``step`` (an epoch, 1 for the first, whose keys then have a history), or as the
        run's summary values at step 0 without a step."""
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        batch = [Metric(k, float(v), now, step or 0) for k, v in metrics.items() if v is not None]
        retry(lambda: self.client.log_batch(self.run_id, metrics=batch))
        if step:
            self.history_keys.update(metrics)

    def finish(self, status: str, metrics: dict[str, float], tags: dict[str, str], artifacts: dict[str, Any]) -> None:
        """Log final metrics as summary values at step 0 (one under a key with a per-epoch history is left out: the
        run keeps that key's last epoch, and a best value is under its ``result_`` key), tags and JSON artifacts,
        set ``ndebench.status`` and, under a lease, ``ndebench.result_lease`` (the epoch that wrote the result), then
        the run's digest as the store returns it (:func:`~ndebench.platform.record.summaries.record_digest`), and
        terminate the run. The lease is read afresh first."""
        from mlflow.entities import RunTag

        self.check(fresh=True)
        if summary := {k: v for k, v in metrics.items() if k not in self.history_keys}:
            self.log_metrics(summary)
        for name, payload in artifacts.items():
            retry(lambda payload=payload, name=name: self.client.log_dict(self.run_id, payload, name))
        if self.lease:
            tags = {**tags, RESULT_LEASE: str(self.lease)}
        all_tags = {f"{TAG}status": status} | {f"{TAG}{k}": str(v) for k, v in tags.items()}
        retry(lambda: self.client.log_batch(self.run_id, tags=[RunTag(k, v) for k, v in all_tags.items()]))
        digest = digest_of(retry(lambda: self.client.get_run(self.run_id)))
        retry(lambda: self.client.set_tag(self.run_id, f"{TAG}{RESULTS_DIGEST}", digest))
        retry(lambda: self.client.set_terminated(self.run_id, mlflow_end(status)))
