"""Nothing in the tracking store runs code on the driver or the workers: checkpoints load only tensors and plain
data, and a checkpoint path read from a tag stays inside the storage root. The attack of the reliability review
(N111) is played on loopback against `ndebench server` and a routine `--resume`."""
from __future__ import annotations

import ast
import contextlib
import json
import os
import pickle
import signal
import subprocess
import sys
import threading
import urllib.request
from pathlib import Path

import pytest
import torch
import yaml
from fakes import start_server, wait_healthy, write_fault_plugin
from ndebench.platform.cluster.storage import Storage
from ndebench.platform.engine.safepaths import UnsafePathError, trial_folder
from ndebench.platform.engine.trainable import latest_checkpoint
from ndebench.platform.record.tracking import TAG, search
from ndebench.platform.worker.state import STATE_FILE

PACKAGE = Path(__file__).resolve().parents[1]


class _Payload:
    """Unpickling it creates the file ``marker``: what an attacker's checkpoint would do."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


def _payload(marker: Path) -> bytes:
    return pickle.dumps(_Payload(marker), protocol=2)  # torch.load's own protocol: no warning hides the refusal


def test_the_payload_is_real(tmp_path):
    pickle.loads(_payload(tmp_path / "probe"))
    assert (tmp_path / "probe").exists()


# Modules whose load/loads (and Unpickler) run code named in the data; library calls that unpickle on our behalf.
PICKLERS = {"pickle", "_pickle", "cPickle", "cloudpickle", "ray_pickle", "dill", "joblib", "marshal", "shelve"}
UNPICKLING = {"get_pickled_error", "_loads_with_cloudpickle", "restore_from_dir", "from_path", "read_pickle",
              "Unpickler", "load_newest_checkpoint", "ExperimentAnalysis", "load_model"}


def _dotted(node: ast.AST) -> str:
    return f"{_dotted(node.value)}.{node.attr}" if isinstance(node, ast.Attribute) else getattr(node, "id", "")


def _true(call: ast.Call, keyword: str) -> bool:
    return any(k.arg == keyword and isinstance(k.value, ast.Constant) and k.value.value is True for k in call.keywords)


def unpickling_calls(source: str) -> list[str]:
    """``line: call`` for every call in ``source`` that can unpickle what it reads: ``load``/``loads``/``Unpickler``
    of a pickling module (however imported), ``torch.load`` without ``weights_only=True``, ``numpy.load`` with
    ``allow_pickle=True``, Ray's and MLflow's loaders of pickled state (``get_pickled_error``, ``Tuner.restore``
    and the like), and any ``TuneFunctionDecoder(allow_cloudpickle=True)``."""
    tree = ast.parse(source)
    aliases = {a.asname or a.name: a.name for node in ast.walk(tree) if isinstance(node, ast.Import)
               for a in node.names}
    imported = {a.asname or a.name: f"{node.module}.{a.name}" for node in ast.walk(tree)
                if isinstance(node, ast.ImportFrom) and node.module for a in node.names}
    found = []
    for call in (n for n in ast.walk(tree) if isinstance(n, ast.Call)):
        name = _dotted(call.func)
        head, _, rest = name.partition(".")
        full = ".".join(filter(None, [imported.get(head) or aliases.get(head, head), rest]))
        module, _, function = full.rpartition(".")
        leaf = module.rpartition(".")[2]
        bad = ((leaf in PICKLERS and function in ("load", "loads", "Unpickler"))
               or (function == "load" and leaf == "torch" and not _true(call, "weights_only"))
               or (function == "load" and leaf in ("numpy", "np") and _true(call, "allow_pickle"))
               or function in UNPICKLING or (function == "restore" and "Tuner" in full)
               or (function == "TuneFunctionDecoder" and _true(call, "allow_cloudpickle")))
        if bad:
            found.append(f"{call.lineno}: {name}")
    return found


def test_the_unpickling_scan_finds_each_kind_of_call():
    source = """
import pickle, torch, numpy as np
import ray.cloudpickle as cp
from joblib import load
from dill import loads as undill
from ray.tune import Tuner
pickle.loads(b""); cp.load(f); load(f); undill(b""); torch.load(p); torch.load(p, weights_only=False)
np.load(p, allow_pickle=True); trial.get_pickled_error(); Tuner.restore(p, fn); pd.read_pickle(p)
torch.load(p, weights_only=True); np.load(p); json.loads(s); yaml.safe_load(s)
"""
    assert unpickling_calls(source) == [
        "7: pickle.loads", "7: cp.load", "7: load", "7: undill", "7: torch.load", "7: torch.load", "8: np.load",
        "8: trial.get_pickled_error", "8: Tuner.restore", "8: pd.read_pickle"]


def test_no_code_of_the_package_unpickles():
    offenders = [f"{path.relative_to(PACKAGE)}:{call}"
                 for folder in ("platform", "models", "regularizers", "datasets")
                 for path in sorted((PACKAGE / folder).rglob("*.py"))
                 for call in unpickling_calls(path.read_text())]
    assert offenders == []


@pytest.mark.parametrize("tag", ["../mlartifacts/evil", "/etc", "study/evaluate-1/../../x", "other/evaluate-1/t",
                                 "study/evaluate-1", "study/evaluate-1/t/checkpoint_1", "study//t", ""])
def test_a_trial_dir_tag_outside_the_storage_root_is_refused(tmp_path, tag):
    with pytest.raises(UnsafePathError, match="ndebench.trial_dir"):
        trial_folder(Storage(tmp_path / "root"), "study", tag)


def test_a_symlink_out_of_the_storage_root_is_refused(tmp_path):
    (tmp_path / "root" / "study").mkdir(parents=True)
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "root" / "study" / "evaluate-1").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(UnsafePathError, match="outside the storage root"):
        trial_folder(Storage(tmp_path / "root"), "study", "study/evaluate-1/t")
    assert trial_folder(Storage(tmp_path / "root"), "study", "study/evaluate-2/t").endswith("root/study/evaluate-2/t")


def test_a_pickled_checkpoint_inside_the_root_is_reported_and_never_unpickled(tmp_path):
    storage = Storage(tmp_path / "root")
    good, evil = tmp_path / "root/s/evaluate-1/t/checkpoint_000001", tmp_path / "root/s/evaluate-1/t/checkpoint_000002"
    good.mkdir(parents=True)
    evil.mkdir(parents=True)
    torch.save({"epoch": 1, "rng": [torch.ones(2)]}, good / STATE_FILE)
    (evil / STATE_FILE).write_bytes(_payload(tmp_path / "pwned"))
    state, problems = latest_checkpoint(storage, "s", "s/evaluate-1/t")
    assert state["epoch"] == 1 and not (tmp_path / "pwned").exists()
    assert len(problems) == 1 and "checkpoint_000002" in problems[0] and "not loaded" in problems[0]


def _http(port: int, method: str, path: str, body: bytes) -> bytes:
    """A plain HTTP request that claims ``Host: localhost``, as the attacker's did."""
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=body, method=method,
                                     headers={"Host": "localhost", "Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as response:
        return response.read()


CONFIG = {"study": "sec", "models": ["neural_cde"], "datasets": ["synthetic"], "regularizers": ["none"],
          "model": {"hidden_size": 8}, "evaluate": {"seeds": [0]},
          "training": {"epochs": 1, "min_epochs": 1, "patience": 1, "lr": 0.01}, "report": {"figures": "none"}}


@pytest.mark.system
def test_the_tracking_server_attack_on_resume_is_refused(tmp_path):
    port, server = start_server(tmp_path)
    try:
        wait_healthy(port, server)
        (tmp_path / "sec.yaml").write_text(yaml.safe_dump(CONFIG))
        uri = f"http://127.0.0.1:{port}"
        command = [sys.executable, "-m", "ndebench.platform", "run", "sec.yaml", "--tracking-uri", uri]
        first = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=600)
        assert first.returncode == 0, first.stdout + first.stderr
        trial = search(uri, "sec", f"tags.`{TAG}phase` = 'evaluate' and tags.`{TAG}kind` = 'trial'")[0]
        cell = search(uri, "sec", f"tags.`{TAG}phase` = 'evaluate' and tags.`{TAG}kind` = 'cell'")[0]

        marker = tmp_path / "PWNED"
        _http(port, "PUT", f"/api/2.0/mlflow-artifacts/artifacts/evil/checkpoint_999999/{STATE_FILE}",
              _payload(marker))
        assert (tmp_path / "mlartifacts/evil/checkpoint_999999" / STATE_FILE).exists()
        for run_id, key, value in [(trial.info.run_id, f"{TAG}status", "running"),
                                   (trial.info.run_id, f"{TAG}trial_dir", "../mlartifacts/evil"),
                                   (cell.info.run_id, f"{TAG}status", "running")]:
            _http(port, "POST", "/api/2.0/mlflow/runs/set-tag",
                  json.dumps({"run_id": run_id, "key": key, "value": value}).encode())

        resumed = subprocess.run([*command, "--resume"], cwd=tmp_path, capture_output=True, text=True, timeout=600)
        assert resumed.returncode == 0, resumed.stdout + resumed.stderr
        assert f"run {trial.info.run_id}: checkpoint path refused: ndebench.trial_dir='../mlartifacts/evil'" \
            in resumed.stdout
        assert not marker.exists()
        runs = search(uri, "sec", f"tags.`{TAG}phase` = 'evaluate' and tags.`{TAG}kind` = 'trial'")
        assert [r.data.tags[f"{TAG}status"] for r in runs] == ["ok"]
        assert runs[0].data.tags[f"{TAG}trial_dir"].startswith("sec/evaluate-")
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=60)


def test_the_worker_refuses_an_unsafe_tag_on_its_own(tmp_path):
    """Defence in depth: a trial that still sees a bad `ndebench.trial_dir` (another driver version, a race with
    the tag's removal) refuses it before reading anything, and says why."""
    from ndebench.platform.engine.trainable import _resume_state

    (tmp_path / "mlartifacts/evil/checkpoint_999999").mkdir(parents=True)
    (tmp_path / "mlartifacts/evil/checkpoint_999999" / STATE_FILE).write_bytes(_payload(tmp_path / "pwned"))
    state, note = _resume_state(Storage(tmp_path / "root"), "sec", {f"{TAG}trial_dir": "../mlartifacts/evil"})
    assert state is None and not (tmp_path / "pwned").exists()
    assert note.startswith("refused: ndebench.trial_dir='../mlartifacts/evil'") and "from scratch" in note


def _plant(study: Path, marker: Path, stop: threading.Event, planted: set[str]) -> None:
    """Someone who can write the shared storage, all through a sweep: every pickle Ray Tune or ndebench writes
    there (``error.pkl`` of every trial, searcher and callback states, checkpoints) becomes the payload, and every
    JSON state file embeds it the way Ray's own JSON embeds cloudpickled objects."""
    raw = _payload(marker)
    embedded = json.dumps({"_type": "CLOUDPICKLE_FALLBACK", "value": raw.hex()}).encode()
    while not stop.is_set():
        for experiment in (p for p in study.glob("*-*") if p.is_dir()):
            for trial in (p for p in experiment.iterdir() if p.is_dir()):
                targets = [trial / "error.pkl", *trial.glob("checkpoint_*/trial_state.pt")]
                for path in targets + [*experiment.glob("*.pkl"), *experiment.glob("*.json")]:
                    with contextlib.suppress(OSError):
                        path.write_bytes(embedded if path.suffix == ".json" else raw)
                        planted.add(path.name)
        stop.wait(0.05)


@pytest.mark.system
def test_a_payload_planted_in_storage_never_runs_on_a_trial_error(tmp_path, uri):
    """A real sweep whose trial fails (an I/O error on every checkpoint write, retries spent) while every file of
    the storage that could hold a pickle is replaced by one: the driver reads the error as text, Ray's ResultGrid
    finds no pickled error to load, the retried worker refuses the planted checkpoint (tensors only)."""
    config = dict(CONFIG, plugins=["faultplugin"], tune={"max_failures": 1},
                  training={"epochs": 4, "min_epochs": 4, "patience": 4, "lr": 0.01})
    (tmp_path / "sec.yaml").write_text(yaml.safe_dump(config))
    write_fault_plugin(tmp_path, {"eio": 2}, forever=True)
    marker, stop, planted = tmp_path / "PWNED", threading.Event(), set()
    attacker = threading.Thread(target=_plant, args=(tmp_path / "ray_results" / "sec", marker, stop, planted))
    attacker.start()
    try:
        done = subprocess.run([sys.executable, "-m", "ndebench.platform", "run", "sec.yaml"], cwd=tmp_path,
                              capture_output=True, text=True, timeout=600,
                              env={**os.environ, "PYTHONPATH": str(tmp_path)})
    finally:
        stop.set()
        attacker.join()
    assert {"error.pkl", "trial_state.pt"} <= planted and any(name.endswith(".json") for name in planted), planted
    assert not marker.exists(), done.stdout + done.stderr
    assert done.returncode in (1, 3), done.stdout + done.stderr
    assert [r.data.tags[f"{TAG}status"] for r in search(uri, "sec", f"tags.`{TAG}kind` = 'trial'")] != ["ok"]


@pytest.mark.parametrize("defended", [False, True])
def test_rays_result_grid_finds_no_pickled_error_to_load_after_the_stage_callback(tmp_path, defended):
    """``Tuner.fit`` builds a ResultGrid, which unpickles ``<trial>/error.pkl`` from storage for each errored trial
    that names one; the stage's progress callback leaves none named, so the text ``error.txt`` is read instead.
    Undefended (Ray as it is), the payload runs: the scenario is real."""
    from ndebench.platform.engine.progress import StageProgress
    from ray.train._internal.storage import StorageContext
    from ray.tune import ResultGrid
    from ray.tune.analysis import ExperimentAnalysis
    from ray.tune.experiment.trial import Trial

    storage = StorageContext(storage_path=str(tmp_path), experiment_dir_name="sec/evaluate-1", trial_dir_name="t1")
    trial = Trial("trainable", stub=True, config={"cell": "c"}, storage=storage, trial_id="t1")
    trial.status = Trial.ERROR
    (tmp_path / "sec/evaluate-1/t1").mkdir(parents=True)
    (tmp_path / "sec/evaluate-1/t1/error.pkl").write_bytes(_payload(tmp_path / "pwned"))
    (tmp_path / "sec/evaluate-1/t1/error.txt").write_text("Failure # 1 (occurred at x)\nValueError: boom\n")
    trial.run_metadata.error_filename, trial.run_metadata.pickled_error_filename = "error.txt", "error.pkl"
    if defended:
        StageProgress("evaluate", {"c": 1}, {"c": "c"}, None, "min", print).on_experiment_end([trial])
    grid = ResultGrid(ExperimentAnalysis(str(tmp_path / "sec/evaluate-1/experiment_state-x.json"), trials=[trial]))
    assert (tmp_path / "pwned").exists() is not defended
    assert grid.errors == ["Failure # 1 (occurred at x)\nValueError: boom\n"]
