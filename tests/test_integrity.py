"""A result or tag changed after its run ended shows: every report flags it from the values it already reads (the
digest the run recorded as it ended, over its results, the tags readers use and its params), and `ndebench verify`
also reads each result metric's history and the study's lease records, and prints the study's fingerprint. On
sqlite, with a synthetic study in the real run layout (the reviews' demonstrations: Continuum Dropout's
test_accuracy set to 0.96 by one `log_metric` per run after the sweep; `ndebench.regularizer` swapped between two
runs; a forged run beside the real one, hidden as a lease run; `ndebench.result_lease` rewritten)."""
from __future__ import annotations

import html
import json
import math
import time

import pytest
from ndebench.platform import api
from ndebench.platform.cli.main import main
from ndebench.platform.record.completeness import record_plan, seal_plan
from ndebench.platform.record.recorder import TrialRecorder
from ndebench.platform.record.schema import PLAN_DIGEST, PLANNED_HASHES, PLANNED_SEEDS, TAG
from ndebench.platform.record.summaries import RESULTS_DIGEST, digest_of, results_digest
from ndebench.platform.record.synthetic import write_study
from ndebench.platform.record.tracking import client, search, study_run, study_yaml
from ndebench.platform.report.integrity import changed_runs, sweep_flags, verify_runs

STUDY = "t"


@pytest.fixture
def study(uri):
    write_study(uri, STUDY, 10)  # model-a on dataset-000: none and continuum_dropout, 5 seeds each
    return uri


def _trials(uri: str, regularizer: str) -> list:
    return search(uri, STUDY, f"tags.`{TAG}kind` = 'trial' and tags.`{TAG}regularizer` = '{regularizer}'")


def _verify(uri: str, capsys) -> tuple[int, str]:
    code = main(["verify", "--study", STUDY, "--tracking-uri", uri])
    return code, capsys.readouterr().out


def test_the_digest_matches_what_the_store_returns_nan_and_infinity_included(uri):
    tags = {"study": STUDY, "phase": "evaluate", "model": "m", "dataset": "d", "regularizer": "none", "seed": "0",
            "cell": "c", "trial_dir": "t/evaluate-1/a"}
    recorder = TrialRecorder(uri, STUDY, {"x": 1}, "h", tags)
    recorder.finish("ok", {"test_accuracy": 0.1 + 0.2, "test_nll": math.inf, "test_ece": math.nan,
                           "val_loss": 1.0}, {}, {})
    run, = search(uri, STUDY)
    assert run.data.tags[f"{TAG}{RESULTS_DIGEST}"] == digest_of(run)
    assert run.data.tags[f"{TAG}{RESULTS_DIGEST}"].startswith("v2 3 ")
    assert changed_runs([run]) == [] and verify_runs(client(uri), [run]) == []


def test_a_rewritten_test_metric_is_flagged_by_the_report_and_by_verify(study, tmp_path, capsys):
    assert _verify(study, capsys)[0] == 0
    clean = api.report_study(STUDY, study, tmp_path / "clean", figures="none")
    assert "WARNING" not in clean.markdown and "WARNING" not in clean.console
    noted = api.verify(STUDY, study).fingerprint
    summary = json.loads((tmp_path / "clean" / STUDY / "summary.json").read_text())
    assert summary["changed_results"] == [] and summary["fingerprint"] == noted
    line = (f"Study fingerprint {noted}: check it with `ndebench verify --study {STUDY} --fingerprint {noted}`"
            " (it changes with anything a report reads); every run's results matched its digest when this report "
            "was written.")
    assert line in clean.markdown
    assert html.escape(line) in (tmp_path / "clean" / STUDY / "report.html").read_text()

    rewritten = [r.info.run_id for r in _trials(study, "continuum_dropout")[:2]]
    for run_id in rewritten:
        client(study).log_metric(run_id, "test_accuracy", 0.96, step=0)
    report = api.report_study(STUDY, study, tmp_path / "after", figures="none")
    assert report.markdown.startswith("WARNING: 2 run(s) have results or tags that changed after the run ended")
    assert report.console.startswith("WARNING: 2 run(s) have results or tags that changed after the run ended")
    assert f"Study fingerprint {api.verify(STUDY, study).fingerprint}: " in report.markdown
    assert "; 2 run(s) changed after they ended (the warning above)." in report.markdown
    assert all(run_id in report.markdown.split("## Results changed after their runs ended")[1] for run_id in rewritten)
    summary = json.loads((tmp_path / "after" / STUDY / "summary.json").read_text())
    assert sorted(f["run_id"] for f in summary["changed_results"]) == sorted(rewritten)
    assert "WARNING: 2 run(s)" in (tmp_path / "after" / STUDY / "report.html").read_text()

    code, out = _verify(study, capsys)
    assert code == 1 and f"study '{STUDY}': 2 run(s) changed after they ended, forged or hidden\n" in out
    for run_id in rewritten:
        assert f"run {run_id} (evaluate " in out
    assert out.count("differ from those it recorded") == 2 and out.count("more than one value") == 2


def test_verify_finds_what_the_digest_cannot(study, capsys):
    """A rewrite that also set a matching digest, and a value logged again after the end: the report's check
    passes both; the metric's history shows them."""
    forged, relogged = (r.info.run_id for r in _trials(study, "none")[:2])
    mlflow_client = client(study)
    mlflow_client.log_metric(forged, "test_accuracy", 0.99, step=0)
    mlflow_client.set_tag(forged, f"{TAG}{RESULTS_DIGEST}", digest_of(mlflow_client.get_run(forged)))
    value = mlflow_client.get_run(relogged).data.metrics["test_accuracy"]
    mlflow_client.log_metric(relogged, "test_accuracy", value, timestamp=int(time.time() * 1000) + 60_000, step=0)
    assert changed_runs(search(study, STUDY)) == []
    code, out = _verify(study, capsys)
    assert code == 1
    assert f"run {forged} " in out and "test_accuracy: more than one value in the metric's history" in out
    assert f"run {relogged} " in out and "test_accuracy: a value logged after the run ended" in out


def _swap(uri: str, tag: str = f"{TAG}regularizer") -> tuple[str, str]:
    """Swap ``tag`` between the first none and the first Continuum Dropout run; their ids."""
    a, b = _trials(uri, "none")[0], _trials(uri, "continuum_dropout")[0]
    client(uri).set_tag(a.info.run_id, tag, b.data.tags[tag])
    client(uri).set_tag(b.info.run_id, tag, a.data.tags[tag])
    return a.info.run_id, b.info.run_id


def test_a_swapped_regularizer_tag_is_flagged_by_the_report_and_by_verify(study, tmp_path, capsys):
    swapped = _swap(study)
    flagged = changed_runs(search(study, STUDY))
    assert sorted(f["run_id"] for f in flagged) == sorted(swapped)
    assert all(f["why"].startswith("its tags or params differ from those it recorded") for f in flagged)
    report = api.report_study(STUDY, study, tmp_path / "r", figures="none")
    assert report.markdown.startswith("WARNING: 2 run(s) have results or tags that changed after the run ended")
    code, out = _verify(study, capsys)
    assert code == 1 and all(f"run {run_id} (evaluate " in out for run_id in swapped)


@pytest.mark.parametrize("value", ["0", "\u00b2"])
def test_a_rewritten_result_lease_is_flagged_and_never_stops_the_report(study, tmp_path, capsys, value):
    run = _trials(study, "none")[0]
    client(study).set_tag(run.info.run_id, f"{TAG}result_lease", value)
    report = api.report_study(STUDY, study, tmp_path / "r", figures="none")  # "²" made it exit 2
    assert report.markdown.startswith("WARNING: 1 run(s)") and run.info.run_id in report.markdown
    assert _verify(study, capsys)[0] == 1


def test_a_forged_twin_with_the_real_run_hidden_as_a_lease_run_is_found(study, tmp_path, capsys):
    """The review's forgery: a newer run with the real run's tags, params, a better result and a matching digest;
    the real run tagged ``ndebench.kind=lease`` to hide it from every reader."""
    mlflow_client = client(study)
    real = _trials(study, "continuum_dropout")[0]
    experiment_id = mlflow_client.get_experiment_by_name(STUDY).experiment_id
    forged = mlflow_client.create_run(experiment_id, tags=real.data.tags).info.run_id
    for key, value in real.data.params.items():
        mlflow_client.log_param(forged, key, value)
    mlflow_client.log_metric(forged, "test_accuracy", 0.96, step=0)
    mlflow_client.set_tag(forged, f"{TAG}{RESULTS_DIGEST}", digest_of(mlflow_client.get_run(forged)))
    mlflow_client.set_terminated(forged, "FINISHED")
    mlflow_client.set_tag(real.info.run_id, f"{TAG}kind", "lease")
    report = api.report_study(STUDY, study, tmp_path / "r", figures="none")
    assert report.markdown.startswith("WARNING: 2 run(s)")
    assert "one of 2 finished runs of its (cell, seed) and config" in report.markdown
    code, out = _verify(study, capsys)
    assert code == 1
    assert f"run {real.info.run_id} (evaluate " in out and "tagged as a lease run, but it holds no lease claim" in out
    assert f"run {forged} (evaluate " in out


def test_the_fingerprint_catches_what_a_writer_forged_with_matching_digests(study, capsys):
    code, out = _verify(study, capsys)
    noted = out.split("fingerprint ")[1].split()[0]
    assert code == 0 and noted.startswith("10:")
    assert main(["verify", "--study", STUDY, "--tracking-uri", study, "--fingerprint", noted]) == 0
    assert f"fingerprint {noted}: unchanged since it was noted" in capsys.readouterr().out
    for run_id in _swap(study):  # swapped, and each digest forged to match
        client(study).set_tag(run_id, f"{TAG}{RESULTS_DIGEST}", digest_of(client(study).get_run(run_id)))
    assert _verify(study, capsys)[0] == 0  # nothing in the record tells
    assert main(["verify", "--study", STUDY, "--tracking-uri", study, "--fingerprint", noted]) == 1
    assert f"CHANGED since {noted} was noted" in capsys.readouterr().out


def test_runs_with_the_older_digest_are_checked_on_their_results_and_named(study, capsys):
    """A study recorded before the digest covered tags (no study run param ``sweep.sha256``, every run with the
    older digest): its results are still checked, a tag change is not flagged (no false alarm), and verify says
    how many runs carry the older format."""
    mlflow_client = client(study)
    study_run, = search(study, STUDY, f"tags.`{TAG}kind` = 'study'")
    mlflow_client.delete_run(study_run.info.run_id)
    runs = _trials(study, "none") + _trials(study, "continuum_dropout")
    for run in runs:
        mlflow_client.set_tag(run.info.run_id, f"{TAG}{RESULTS_DIGEST}", results_digest(run.data.metrics))
    mlflow_client.set_tag(runs[0].info.run_id, f"{TAG}variant", "x")
    assert changed_runs(search(study, STUDY)) == []
    code, out = _verify(study, capsys)
    assert code == 0 and "10 run(s) carry the digest of the older format (result metrics only)" in out
    mlflow_client.log_metric(runs[1].info.run_id, "test_accuracy", 0.5, step=0)
    flagged, = changed_runs(search(study, STUDY))
    assert flagged["run_id"] == runs[1].info.run_id and "of the older format: results only" in flagged["why"]


def test_a_trial_run_whose_lease_is_no_claims_is_listed(study, capsys):
    run = _trials(study, "none")[0]
    mlflow_client = client(study)
    mlflow_client.set_tag(run.info.run_id, f"{TAG}lease", "1")
    mlflow_client.set_tag(run.info.run_id, f"{TAG}lease_id", "made-up")
    mlflow_client.set_tag(run.info.run_id, f"{TAG}{RESULTS_DIGEST}", digest_of(mlflow_client.get_run(run.info.run_id)))
    code, out = _verify(study, capsys)
    assert code == 1 and f"run {run.info.run_id} (evaluate " in out
    assert "its lease (epoch 1, id made-up) is no claim of the study's lease records" in out


def test_a_finished_run_without_the_digest_of_its_end_is_flagged(study):
    run, blank = _trials(study, "none")[:2]
    client(study).set_tag(run.info.run_id, f"{TAG}{RESULTS_DIGEST}", "unfinished")
    client(study).set_tag(blank.info.run_id, f"{TAG}{RESULTS_DIGEST}", "")
    flagged = {f["run_id"]: f["why"] for f in changed_runs(search(study, STUDY))}
    assert flagged[run.info.run_id] == "it reads as ok but holds no digest of its end"
    assert flagged[blank.info.run_id].startswith("it carries the older digest") and len(flagged) == 2


def _study_run(uri: str):
    run, = search(uri, STUDY, f"tags.`{TAG}kind` = 'study'")
    return run


@pytest.mark.parametrize("how", ["tags", "digest", "lease"])
def test_a_run_with_phase_and_kind_removed_is_named_by_the_report_and_by_verify(study, tmp_path, capsys, how):
    """The writer's hiding move: both tags that place a run removed (and its digest, which took it out of verify's
    view), or its kind made ``lease`` and its phase removed: the report has no place for it, so it names it instead
    of losing it."""
    hidden = _trials(study, "continuum_dropout")[0].info.run_id
    for tag in ("phase", "kind") + ((RESULTS_DIGEST,) if how == "digest" else ()):
        client(study).delete_tag(hidden, f"{TAG}{tag}")
    if how == "lease":
        client(study).set_tag(hidden, f"{TAG}kind", "lease")
    report = api.report_study(STUDY, study, tmp_path / "r", figures="none")
    assert report.console.startswith("WARNING: 1 run(s)") and report.markdown.startswith("WARNING: 1 run(s)")
    listed = report.markdown.split("## Results changed after their runs ended")[1]
    why = ("tagged as a lease run, but it holds no lease claim" if how == "lease"
           else "it carries no ndebench.kind and ndebench.phase a reader places")
    assert hidden in listed and why in listed
    code, out = _verify(study, capsys)
    assert code == 1 and f"run {hidden} (" in out and why in out


@pytest.mark.parametrize("how", ["deleted", "older"])
def test_swapped_regularizer_tags_with_the_digests_deleted_or_older_are_flagged(study, tmp_path, capsys, how):
    """Review N3b/N3c: a swap, then each digest deleted or replaced by the older results-only format: in a study
    whose runs record the digest of their tags, a missing or older digest is itself a finding."""
    swapped = _swap(study)
    for run_id in swapped:
        run = client(study).get_run(run_id)
        if how == "deleted":
            client(study).delete_tag(run_id, f"{TAG}{RESULTS_DIGEST}")
        else:
            client(study).set_tag(run_id, f"{TAG}{RESULTS_DIGEST}", results_digest(run.data.metrics))
    report = api.report_study(STUDY, study, tmp_path / "r", figures="none")
    assert report.markdown.startswith("WARNING: 2 run(s)")
    assert "every run's results matched its digest" not in report.markdown
    code, out = _verify(study, capsys)
    assert code == 1 and all(f"run {run_id} (evaluate " in out for run_id in swapped)
    assert ("holds no digest of its end" if how == "deleted" else "carries the older digest") in out


@pytest.mark.parametrize("plan", ['{"0": "bogus"}', "{}"])
def test_a_rewritten_plan_is_flagged(study, tmp_path, capsys, plan):
    """Review (b2): one tag on an evaluate cell run (``planned_hashes``) dropped a seed or the whole row, verify
    passing; the plan's digest on the study run now tells."""
    cells = search(study, STUDY, f"tags.`{TAG}kind` = 'cell'")
    record_plan(study, {c.info.run_id: {seed: f"{c.data.tags[f'{TAG}cell']}#{seed}" for seed in range(5)}
                        for c in cells})
    seal_plan(study, STUDY, _study_run(study).info.run_id)
    assert _verify(study, capsys)[0] == 0
    cell, = (c for c in cells if c.data.tags[f"{TAG}regularizer"] == "continuum_dropout")
    client(study).set_tag(cell.info.run_id, PLANNED_HASHES, plan)
    report = api.report_study(STUDY, study, tmp_path / "r", figures="none")
    assert report.markdown.startswith("WARNING: 1 run(s)")
    code, out = _verify(study, capsys)
    assert code == 1 and f"run {_study_run(study).info.run_id} " in out and "differs from the one the sweep" in out


def test_rewritten_planned_seeds_and_a_deleted_plan_digest_are_flagged(study, capsys):
    mlflow_client, run_id = client(study), _study_run(study).info.run_id
    mlflow_client.set_tag(run_id, PLANNED_SEEDS, "[0, 1]")
    code, out = _verify(study, capsys)
    assert code == 1 and "the planned seeds) differs from the one the sweep recorded" in out
    mlflow_client.delete_tag(run_id, PLAN_DIGEST)
    code, out = _verify(study, capsys)
    assert code == 1 and f"run {run_id} " in out and "holds no digest of its plan" in out


def test_an_overwritten_sweep_yaml_is_flagged_ignored_and_changes_the_fingerprint(study, tmp_path, capsys):
    """Review (b3): the study run's ``sweep.yaml`` overwritten with ``alpha: 0.6`` moved the stars while the
    fingerprint said "unchanged"; it is bound to the SHA-256 the run recorded as it began."""
    noted = api.verify(STUDY, study).fingerprint
    run_id = _study_run(study).info.run_id
    client(study).log_text(run_id, "report:\n  alpha: 0.6\n", "sweep.yaml")
    assert api.study_report_settings(STUDY, study, alpha=None)["alpha"] == 0.05
    code = main(["verify", "--study", STUDY, "--tracking-uri", study, "--fingerprint", noted])
    out = capsys.readouterr().out
    assert code == 1 and f"run {run_id} " in out and "its sweep.yaml (sha256" in out
    assert f"CHANGED since {noted} was noted" in out
    report = api.report_study(STUDY, study, tmp_path / "r", figures="none")
    assert report.markdown.startswith("WARNING: 1 run(s)") and "alpha=0.6" not in report.markdown


def test_a_recorded_sweep_yaml_is_read_while_it_matches_its_digest(tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    run_id = study_run(uri, STUDY, description="", params={}, yaml_text="report:\n  alpha: 0.1\n")
    assert study_yaml(uri, STUDY) == "report:\n  alpha: 0.1\n"
    client(uri).log_text(run_id, "report:\n  alpha: 0.6\n", "sweep.yaml")
    assert study_yaml(uri, STUDY) is None and study_yaml(uri, STUDY, bound=False) == "report:\n  alpha: 0.6\n"
    assert "differs from the one it recorded as it began" in sweep_flags(search(uri, STUDY), "x")[0]["why"]
