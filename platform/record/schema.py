"""The run record's vocabulary, written once for its writers, its readers and the report: the MLflow tag
prefix and parent tag, the run statuses, and the leading columns of ``results.csv``."""
from __future__ import annotations

from typing import Literal, get_args

TAG = "ndebench."
PARENT = "mlflow.parentRunId"
# Set on an evaluate attempt that a later run of the same (cell, seed) replaced (record.completeness).
SUPERSEDED = f"{TAG}superseded_by"
# The study run's planned evaluate seeds, as the latest sweep of the study planned them.
PLANNED_SEEDS = f"{TAG}evaluate_seeds"
# On an evaluate cell run: the config hash the latest sweep planned for each seed, a JSON object (seed -> hash,
# null where the cell has no evaluated config; {} on a cell the config no longer has): record.completeness.
PLANNED_HASHES = f"{TAG}planned_hashes"
# On the study run: the digest of the plan (record.summaries.plan_digest): every evaluate cell run's planned_hashes
# and the study run's evaluate_seeds, as the sweep last wrote them.
PLAN_DIGEST = f"{TAG}plan_digest"
# The study run's param: the SHA-256 of the sweep.yaml it recorded ("none" without one). Params never change, so the
# artifact is bound to it, and its presence says the study was begun by a release that digests every record it reads.
SWEEP_SHA = "sweep.sha256"
# On a trial run: the lease epoch of the driver whose trial wrote its result (ndebench.lease: the epoch that last
# made or continued it). Lower than ndebench.lease: a driver that had lost the study wrote it (record.lease.fence).
RESULT_LEASE = "result_lease"
# The tags of a trial run that decide what readers make of it (its cell, seed, phase, kind, status, lease and the
# labels of its row), covered by its digest (record.summaries.record_digest) with its params and results.
DIGEST_TAGS = (*(f"{TAG}{k}" for k in (
    "kind", "phase", "study", "cell", "seed", "model", "dataset", "regularizer", "variant", "config_hash", "status",
    "lease", "lease_id", RESULT_LEASE, "metric", "n_mc", "test_protocol", "num_classes", "error", "message")), PARENT)
# Where a trial's floating-point work ran (engine.provenance): a rerun reproduces a run bit for bit on the same
# commit, libraries, CPU capability, thread count and GPU; the report says when a study's runs mix them.
MACHINE_TAGS = ("cpu_model", "cpu_capability", "threads", "gpu", "gpu_driver")

Status = Literal["ok", "diverged", "error", "timeout", "running", "stopped", "interrupted"]
STATUSES: tuple[Status, ...] = get_args(Status)
# A finished trial produced a result (a diverged one too); error and timeout runs failed (a timeout ran past
# ``tune.trial_timeout_s``); running, stopped and interrupted ones are unfinished.
FINISHED_STATUSES: tuple[Status, ...] = ("ok", "diverged")
# The statistics count these; running, stopped and interrupted runs are reported beside the tables instead.
COUNTED_STATUSES: tuple[Status, ...] = ("ok", "diverged", "error", "timeout")
# Run counts in reports always list these, then any other status present.
LISTED_STATUSES: tuple[Status, ...] = ("ok", "diverged", "error")
# A search trial that ended one of these ways spent one unit of its cell's budget (``stopped``: by ASHA).
SPENT_STATUSES: tuple[Status, ...] = ("ok", "diverged", "error", "timeout", "stopped")
# Cut off by a stop of the sweep (Ctrl-C, SIGTERM, SIGHUP) or by the loss of its driver: ``--resume`` continues it.
RESUMABLE_STATUSES: tuple[Status, ...] = ("running", "interrupted")

# One row per evaluate run; the test_* metric columns follow.
RESULTS_COLUMNS = ("variant", "run_id", "study", "model", "dataset", "regularizer", "config_hash", "status", "message",
                   "seed", "test_protocol", "metric")


def mlflow_end(status: str) -> str:
    """MLflow's status for a run that ended as ``status``: ``FINISHED`` for a result, else ``FAILED``."""
    return "FINISHED" if status in FINISHED_STATUSES else "FAILED"
