"""The Ray Tune trainable of a stack of trials (``resources.stack``): an evaluate cell's seeds, or a search stage's
points of one cell that differ only in the regularizer's hyperparameters (a tune stage's grid points). One Tune
trial, one process, K MLflow runs, each exactly the run its trial would have recorded alone (tags, params,
per-epoch and final metrics, weights), trained by :func:`~ndebench.platform.worker.stack.run_stack`.

A Tune checkpoint of a stack holds one folder per member, ``member-<config hash>/`` (``trial_state.pt`` and the
run id), written after each epoch of the stack. A retried Tune trial restores every member from it; after the
driver died, each unfinished member run is found by its config hash and resumed from its folder under the old
trial's checkpoints (:func:`~ndebench.platform.engine.trainable.latest_checkpoint`), whatever stack it is in now.
"""
from __future__ import annotations

import contextlib
import json
import sys
import traceback
from collections.abc import Collection
from pathlib import Path
from typing import Any

from ndebench.platform.cluster.joining import check_this_node
from ndebench.platform.cluster.storage import Storage
from ndebench.platform.common.plugins import import_plugins
from ndebench.platform.engine.provenance import worker_provenance
from ndebench.platform.engine.trainable import (
    RUN_ID_FILE,
    _resume_state,
    finish_run,
    for_tune,
    full_config,
    member_folder,
    trainable,
    trial_tags,
)
from ndebench.platform.failures.infrastructure import (
    TrialInfrastructureError,
    infrastructure_failure,
    infrastructure_retried,
)
from ndebench.platform.failures.leftovers import CHECKPOINT, process_folder
from ndebench.platform.record.recorder import TrialRecorder
from ndebench.platform.record.schema import RESUMABLE_STATUSES, TAG
from ndebench.platform.record.summaries import TIME_METRICS, time_summaries
from ndebench.platform.record.system_metrics import system_metrics as sampled
from ndebench.platform.record.tracking import epoch_values, last_logged_step, run_status, search
from ndebench.platform.spec.config import config_hash
from ndebench.platform.worker.spec import TrialResult, TrialSpec
from ndebench.platform.worker.stack import run_stack
from ndebench.platform.worker.state import load_trial_state, save_trial_state

# The key of an evaluate_configs entry that lists a stack's member keys, and of a search trial's config that lists
# its members' sampled values.
STACK = "stack"


def trial_or_stack(config: dict[str, Any], **kwargs: Any) -> None:
    """The trainable of every stage: a stack (an evaluate trial whose key names one, ``evaluate_configs[key]`` is
    ``{"stack": [member keys]}``; a search trial whose config holds ``"stack": [sampled values]``) trains as one,
    any other trial :func:`trainable` alone."""
    entry = (kwargs.get("evaluate_configs") or {}).get(config.get("trial"))
    if STACK in config or (entry is not None and STACK in entry):
        train_stack(config, **kwargs)
    else:
        trainable(config, **kwargs)


def stack_members(config: dict[str, Any], evaluate_configs: dict[str, dict[str, Any]] | None,
                  templates: dict[str, dict[str, Any]] | None) -> list[dict[str, Any]]:
    """The resolved configs of a stack's members: an evaluate stack's member keys into ``evaluate_configs``, or a
    search stack's sampled values (``config["stack"]``, each with the stack's ``cell``, ``phase`` and ``seed``)
    over its cell's ``templates`` entry, as :func:`~ndebench.platform.engine.trainable.full_config` completes a
    trial alone."""
    if STACK in config:
        shared = {k: v for k, v in config.items() if k != STACK}
        return [full_config({**shared, **values}, None, templates) for values in config[STACK]]
    return [dict((evaluate_configs or {})[key]) for key in (evaluate_configs or {})[config["trial"]][STACK]]


class MemberRun:
    """One member's MLflow run: reattached or created as :func:`trainable` does, its per-epoch metrics logged
    (epochs an earlier attempt logged are not logged again), its checkpoint folder in the stack's staging."""

    def __init__(self, config: dict[str, Any], tracking_uri: str, parent: str | None, tags: dict[str, str],
                 restored: dict[str, tuple[dict[str, Any], str]], storage: Storage | None,
                 resume_runs: dict[str, str] | None = None):
        self.config, self.identity = config, config_hash(config)
        self.folder = member_folder(self.identity)
        state, run_id = restored.get(self.folder, (None, None))
        run_id = run_id or (resume_runs or {}).get(self.identity)
        own = tags
        if run_id is None and config["phase"] != "evaluate":
            # The recorder continues a search trial's run found by its trial folder, which the members share:
            # a member finds its own run by its config hash too, and the recorder is not given the folder to look.
            run_id = _retried_run(tracking_uri, config["study"], tags, self.identity, config["phase"])
            own = {k: v for k, v in tags.items() if k != "trial_dir"}
        self.recorder = TrialRecorder(tracking_uri, config["study"], config, self.identity,
                                      trial_tags(config, config["phase"]) | own, parent_run_id=parent, run_id=run_id)
        if own is not tags:
            self.recorder.set_tags({"trial_dir": tags["trial_dir"]})
        self.note = ""
        if state is None:
            state, self.note = _resume_state(storage, config["study"], self.recorder.previous_tags)
        if self.note:
            print(f"ndebench: run {self.recorder.run_id}: {self.note}", file=sys.stderr, flush=True)
            self.recorder.set_tags({"resume_note": self.note})
        self.state = state
        self.logged = last_logged_step(self.recorder.client, self.recorder.run_id) if self.recorder.reattached else 0
        self.epoch = state["epoch"] if state is not None else 0
        self.times: dict[str, list[float]] = {key: [] for key in TIME_METRICS}

    def on_epoch(self, record: dict[str, float]) -> None:
        self.epoch += 1
        if self.epoch > self.logged:
            self.recorder.log_metrics(record, step=self.epoch)
            for key in TIME_METRICS:
                if key in record:
                    self.times[key].append(record[key])

    def summaries(self) -> dict[str, float]:
        if self.logged:
            client, run_id = self.recorder.client, self.recorder.run_id
            return time_summaries({key: epoch_values(client, run_id, key) for key in TIME_METRICS})
        return time_summaries(self.times)

    def checkpoint_into(self, staging: Path) -> Any:
        def hook(done: int, snapshot: Any) -> None:
            folder = staging / self.folder
            folder.mkdir(exist_ok=True)
            save_trial_state(snapshot(), folder)
            (folder / RUN_ID_FILE).write_text(self.recorder.run_id)

        return hook


def _retried_run(tracking_uri: str, study: str, tags: dict[str, str], identity: str, phase: str) -> str | None:
    """The run of a search stack's member that an earlier attempt of the same Tune trial cut off before its first
    checkpoint (same trial folder and config hash, still resumable, of no newer driver), else ``None``."""
    lease = int(tags.get("lease") or 0)
    found = [r for r in search(tracking_uri, study, f"tags.`{TAG}trial_dir` = '{tags['trial_dir']}' and "
                                                    f"tags.`{TAG}config_hash` = '{identity}' and "
                                                    f"tags.`{TAG}phase` = '{phase}'")
             if run_status(r) in RESUMABLE_STATUSES and int(r.data.tags.get(f"{TAG}lease") or 0) <= lease]
    return found[0].info.run_id if found else None


def _restored() -> dict[str, tuple[dict[str, Any], str]]:
    """Member folder -> (state, run id) of the Tune checkpoint this trial restarts from (empty when none)."""
    from ray import tune

    checkpoint = tune.get_checkpoint()
    if checkpoint is None:
        return {}
    with checkpoint.as_directory() as folder:
        return {member.name: (load_trial_state(member), (member / RUN_ID_FILE).read_text().strip())
                for member in Path(folder).iterdir() if member.is_dir()}


@infrastructure_retried
def train_stack(config: dict[str, Any], *, tracking_uri: str, parents: dict[str, str],
                evaluate_configs: dict[str, dict[str, Any]] | None = None, resume_runs: dict[str, str] | None = None,
                templates: dict[str, dict[str, Any]] | None = None, storage_uri: str = "", experiment: str = "",
                run_tags: dict[str, str] | None = None, checkpoint_every: int = 1, save_weights: bool = False,
                plugins: tuple[str, ...] = (), node_check: tuple[str | None, str | None] | None = None,
                system_metrics: bool = True, trial_timeout_s: float | None = None, **_: Any) -> None:
    """Ray Tune function trainable of a stack: the members :func:`stack_members` gives, each its own MLflow run
    under its cell run (a search member whose config hash is in ``resume_runs`` continues that run), trained as
    one stack; arguments as :func:`trainable`'s. A report after each epoch of the stack (``status`` ``running``,
    the first member's ``run_id``, ``run_ids``), with a checkpoint of every member every ``checkpoint_every``
    epochs; the final report's ``status`` is ``ok`` when every member's is, else the first other member status,
    with the members' messages; a search stack's final report adds ``members``, per member what a trial alone
    reports at its end (``status``, its ``val_*`` metrics, ``run_id``), for the searcher. A failure of the tracking
    store, storage or disk leaves the members' runs open and goes to Ray, which retries the stack from its
    checkpoint (:mod:`ndebench.platform.failures.infrastructure`)."""
    from ray import tune

    if node_check:
        check_this_node(*node_check)
    import_plugins(plugins)
    configs = stack_members(config, evaluate_configs, templates)
    phase = configs[0]["phase"]
    storage = Storage(storage_uri) if storage_uri else None
    machine = worker_provenance(configs[0].get("device", "cpu"), configs[0].get("training.threads"))
    tags = (run_tags or {}) | machine | {"trial_dir": f"{experiment}/{tune.get_context().get_trial_id()}"}
    restored = _restored()
    members = [MemberRun(c, tracking_uri, parents.get(c["cell"]), tags, restored, storage, resume_runs)
               for c in configs]
    run_ids = [m.recorder.run_id for m in members]
    epochs = 0
    with process_folder(CHECKPOINT) as staging, contextlib.ExitStack() as monitors:

        def report() -> None:
            nonlocal epochs
            epochs += 1
            progress = {"epoch": epochs, "status": "running", "run_id": run_ids[0], "run_ids": run_ids}
            if epochs % checkpoint_every:
                tune.report(progress)
            else:
                tune.report(progress, checkpoint=tune.Checkpoint.from_directory(staging))

        for m in members:
            monitors.enter_context(sampled(m.recorder.run_id, tracking_uri, enabled=system_metrics,
                                           check=m.recorder.check))
            # Before training, so that a member its stack's fault ended says it was stacked.
            m.recorder.set_tags({"stack": str(len(members))})
        notes: list[str] = []
        try:
            results = run_stack([TrialSpec.from_flat(c) for c in configs], on_epoch=[m.on_epoch for m in members],
                                on_checkpoint=[m.checkpoint_into(Path(staging)) for m in members],
                                resume_states=[m.state for m in members], evaluate_test=phase == "evaluate",
                                timeout_s=trial_timeout_s, note=notes.append, on_stack_epoch=report)
        except Exception as exc:  # noqa: BLE001 - recorded and reported; the traceback goes to the sweep's log
            if cause := infrastructure_failure(exc, tracking_uri, f"{storage_uri or 'storage'}/{tags['trial_dir']}"):
                raise TrialInfrastructureError(f"{cause} (runs {', '.join(run_ids)})") from exc
            traceback.print_exc()
            message = f"{type(exc).__name__}: {exc}"[:4000]
            for m in members:
                m.recorder.finish("error", m.summaries(), {"error": message}, {})
            tune.report({"status": "error", "message": message, "run_id": run_ids[0], "run_ids": run_ids})
            return
    finals = []
    for m, result in zip(members, results, strict=True):
        if notes:
            m.recorder.set_tags({"stack_note": notes[0]})
        finals.append(finish_run(m.recorder, result, phase, m.summaries(), save_weights))
    report = _final(results, members)
    if phase != "evaluate":
        report["members"] = [_searched(result, final, m.recorder.run_id)
                             for result, final, m in zip(results, finals, members, strict=True)]
    tune.report(report)


def _final(results: list[TrialResult], members: list[MemberRun]) -> dict[str, Any]:
    bad = [r for r in results if r.status != "ok"]
    return {"status": bad[0].status if bad else "ok",
            "message": "; ".join(f"run {m.recorder.run_id}: {r.message}" for r, m in zip(results, members, strict=True)
                                 if r.message),
            "run_id": members[0].recorder.run_id, "run_ids": [m.recorder.run_id for m in members],
            "resume_note": "; ".join(m.note for m in members if m.note)}


def _searched(result: TrialResult, final: dict[str, float], run_id: str) -> dict[str, Any]:
    """A search member's outcome as its trial alone reports it to Tune at its end."""
    val_loss = result.val.get("val_loss", float("inf")) if result.status == "ok" else float("inf")
    return {**for_tune(final), "val_loss": val_loss, "status": result.status, "run_id": run_id}


def stack_group(config: dict[str, Any]) -> str:
    """What the trials of one stack share: the config less its seed, cell, variant (its label and ``fixed`` values)
    and ``regularizer.*`` hyperparameters. A cell's seeds share it, and so do the variants of a regularizer
    (``variants:``) with its tuned cell."""
    shared = {k: v for k, v in config.items()
              if k not in ("cell", "variant", "fixed", "seed") and not k.startswith("regularizer.")}
    return json.dumps(shared, sort_keys=True, default=str)


def stack_trials(trials: dict[str, dict[str, Any]], size: int, alone: Collection[str] = ()
                 ) -> dict[str, dict[str, Any]]:
    """The Tune trials of an evaluate stage's ``trials`` (``<cell>#<seed>`` -> config): the trials of each
    :func:`stack_group` in stacks of up to ``size`` in the order given, a stack as ``<first member's
    cell>#<seed>+<seed>...`` (its members' seeds) -> ``{"stack": [keys]}``; a stack of one, and each key in
    ``alone``, stays its trial's own key and config."""
    groups: dict[str, list[str]] = {}
    out: dict[str, dict[str, Any]] = {key: trials[key] for key in trials if key in alone}
    for key, config in trials.items():
        if key not in alone:
            groups.setdefault(stack_group(config), []).append(key)
    for keys in groups.values():
        for first in range(0, len(keys), size):
            chunk = keys[first:first + size]
            if len(chunk) == 1:
                out[chunk[0]] = trials[chunk[0]]
            else:
                out[f"{trials[chunk[0]]['cell']}#{_seeds(chunk, trials)}"] = {STACK: chunk}
    return out


def trial_owners(stacks: dict[str, dict[str, Any]], trials: dict[str, dict[str, Any]]) -> dict[str, tuple[str, str]]:
    """Each Tune trial of :func:`stack_trials` -> (the cell key it counts under, its seeds as shown: ``3`` or a
    stack's ``0+1+2``): the cell and seeds of its members' ``trials`` configs (a stack's first member's cell)."""
    members = {key: entry.get(STACK) or [key] for key, entry in stacks.items()}
    return {key: (trials[keys[0]]["cell"], _seeds(keys, trials)) for key, keys in members.items()}


def _seeds(keys: list[str], trials: dict[str, dict[str, Any]]) -> str:
    """The seeds of the trials ``keys`` as a stack's name and progress lines show them: ``0+1+2``."""
    return "+".join(str(trials[k]["seed"]) for k in keys)


def member_outcomes(outcomes: dict[str, list[dict[str, Any]]], configs: dict[str, dict[str, Any]] | None = None,
                    trials: dict[str, dict[str, Any]] | None = None) -> dict[str, list[dict[str, Any]]]:
    """The per-cell ``outcomes`` of a stage with each stack's outcome repeated for each of its members (config
    ``{"trial": member key}`` of an evaluate stack, under the member's own cell; the member's own sampled config of
    a search stack), as the driver counts and closes runs per trial. ``configs``: an evaluate stage's
    :func:`stack_trials`; ``trials``: its members' configs, which name their cells."""
    out: dict[str, list[dict[str, Any]]] = {cell: [] for cell in outcomes}
    for cell, group in outcomes.items():
        for outcome in group:
            config = outcome["config"]
            if STACK in config:
                shared = {k: v for k, v in config.items() if k != STACK}
                out[cell] += [dict(outcome, config={**shared, **values}) for values in config[STACK]]
                continue
            entry = (configs or {}).get(config.get("trial"), {})
            members = entry.get(STACK) if isinstance(entry, dict) else None
            if not members:
                out[cell].append(outcome)
            for key in members or ():
                out.setdefault((trials or {})[key]["cell"], []).append(dict(outcome, config={"trial": key}))
    return out
