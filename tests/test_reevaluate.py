"""``ndebench reevaluate`` on a really trained tiny run: weights logged to MLflow, reloaded, re-scored with
several N_MC, recorded as reevaluate runs and tabulated by ``ndebench report``."""
import numpy as np
import pytest
import torch
from ndebench.models.integrate import TrialRNG
from ndebench.platform.cli.main import main
from ndebench.platform.common.weights import load_weights, log_weights
from ndebench.platform.engine.reevaluate import parse_n_mc
from ndebench.platform.record import tracking
from ndebench.platform.record.recorder import TrialRecorder
from ndebench.platform.worker.build import build_trial
from ndebench.platform.worker.evaluation import trial_loss
from ndebench.platform.worker.spec import TrialSpec

FLAT = {"study": "tiny", "model": "neural_cde", "dataset": "synthetic", "seed": 0, "phase": "evaluate",
        "model.hidden_size": 8, "training.lr": 0.01, "training.threads": 1, "solver.method": "euler"}
CD = {**FLAT, "regularizer": "continuum_dropout", "regularizer.p": 0.3, "regularizer.m": 10}
NONE = {**FLAT, "regularizer": "none"}


def _train_one_epoch(spec: TrialSpec) -> dict[str, torch.Tensor]:
    built = build_trial(spec)
    optimizer = torch.optim.Adam(built.model.parameters(), lr=spec.training.lr)
    rng, shuffle = TrialRNG.from_seed(spec.seed), torch.Generator().manual_seed(spec.seed)
    built.model.train()
    for inputs, targets in built.feeds["train"].batches(built.batch_size, shuffle):
        optimizer.zero_grad()
        trial_loss(built.model(inputs, rng), targets, None).backward()
        optimizer.step()
    return built.model.state_dict()


def _record(uri: str, config: dict) -> str:
    tags = {k: config[k] for k in ("phase", "model", "dataset", "regularizer", "seed")}
    recorder = TrialRecorder(uri, "tiny", config, config["regularizer"], tags)
    log_weights(recorder.client, recorder.run_id, _train_one_epoch(TrialSpec.from_flat(config)))
    recorder.finish("ok", {"test_accuracy": 0.5}, {}, {})
    return recorder.run_id


def _accuracy_by_hand(config: dict, state: dict, n_mc: int) -> float:
    built = build_trial(TrialSpec.from_flat(config))
    built.model.load_state_dict(state)
    built.model.eval()
    rng = TrialRNG.for_evaluation(config["seed"])
    hits = []
    with torch.no_grad():
        for inputs, y in built.feeds["test"].batches(built.batch_size, None):
            logits = built.model.predict(inputs, rng, n_mc=n_mc).logits
            hits.append((logits.argmax(-1) == y).numpy())
    return float(np.mean(np.concatenate(hits)))


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    root = tmp_path_factory.mktemp("reeval")
    uri = f"sqlite:///{root / 'mlflow.db'}"
    cd_run, _ = _record(uri, CD), _record(uri, NONE)
    assert main(["reevaluate", "--study", "tiny", "--n-mc", "1,5", "--tracking-uri", uri]) == 0
    return root, uri, cd_run


def test_weights_round_trip_and_reevaluate_runs_match_a_hand_computation(study):
    root, uri, cd_run = study
    state = load_weights(tracking.client(uri), cd_run)
    runs = tracking.search(uri, "tiny", "tags.`ndebench.phase` = 'reevaluate'")
    by_n = {int(r.data.tags["ndebench.n_mc"]): r for r in runs}
    assert sorted(by_n) == [1, 5]  # the deterministic `none` run is skipped
    for n, run in by_n.items():
        assert run.data.tags["ndebench.source_run"] == cd_run
        assert run.data.tags["ndebench.regularizer"] == "continuum_dropout"
        assert run.data.tags["ndebench.metric"] == "accuracy"
        assert run.data.metrics["test_accuracy"] == pytest.approx(_accuracy_by_hand(CD, state, n), abs=1e-12)
    # Resumable: a second call adds nothing.
    assert main(["reevaluate", "--study", "tiny", "--n-mc", "5,1", "--tracking-uri", uri]) == 0
    assert len(tracking.search(uri, "tiny", "tags.`ndebench.phase` = 'reevaluate'")) == 2


def test_report_tabulates_accuracy_against_n_mc(study):
    root, uri, _ = study
    assert main(["report", "--study", "tiny", "--tracking-uri", uri, "--out", str(root / "reports")]) == 0
    text = (root / "reports" / "tiny" / "mc_samples.md").read_text()
    runs = tracking.search(uri, "tiny", "tags.`ndebench.phase` = 'reevaluate'")
    acc = {int(r.data.tags["ndebench.n_mc"]): r.data.metrics["test_accuracy"] for r in runs}
    for n in (1, 5):
        assert f"| continuum_dropout | {n} | " in text
        assert f"{acc[n]:.3f}" in text.split(f"| continuum_dropout | {n} | ")[1].split("\n")[0]
    assert "| none | – | 0.500 |" in text
    assert "MC samples" in (root / "reports" / "tiny" / "report.html").read_text()


@pytest.mark.parametrize("text", ["0", "1,x", "-3", "2.5"])
def test_bad_n_mc_is_rejected_with_the_entry(text):
    with pytest.raises(ValueError, match="--n-mc entry"):
        parse_n_mc(text)


def test_the_data_directory_never_comes_from_a_run(tmp_path, uri, monkeypatch):
    """A run's `data_dir` param is whatever its writer put there: reevaluate reads the local data directory."""
    from ndebench.platform.engine import reevaluate as module

    _record(uri, {**CD, "data_dir": str(tmp_path / "planted")})
    seen = []
    real = module.build_trial
    monkeypatch.setattr(module, "build_trial", lambda spec: seen.append(spec.data_dir) or real(spec))
    assert main(["reevaluate", "--study", "tiny", "--n-mc", "1", "--tracking-uri", uri,
                 "--data-dir", str(tmp_path / "mine")]) == 0
    assert seen == [str((tmp_path / "mine").resolve())]
