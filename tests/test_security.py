"""Nothing in the tracking store runs code on the driver or the workers: checkpoints load only tensors and plain
data, and a checkpoint path read from a tag stays inside the storage root. The attack of the reliability review
(N111) is played on loopback against `ndebench server` and a routine `--resume`."""
from __future__ import annotations

import json
import os
import pickle
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
import torch
import yaml
from fakes import start_server, wait_healthy
from ndebench.platform.engine.safepaths import UnsafePathError, trial_folder
from ndebench.platform.engine.storage import Storage
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


def test_no_code_loads_with_weights_only_false():
    offenders = [f"{path.relative_to(PACKAGE)}:{number}"
                 for folder in ("platform", "models", "regularizers", "datasets")
                 for path in sorted((PACKAGE / folder).rglob("*.py"))
                 for number, line in enumerate(path.read_text().splitlines(), 1)
                 if "weights_only=False" in line.replace(" ", "") or "pickle.load" in line]
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
          "training": {"epochs": 1, "min_epochs": 1, "patience": 1, "lr": 0.01}}


@pytest.mark.system
def test_the_tracking_server_attack_on_resume_is_refused(tmp_path):
    port, server = start_server(tmp_path)
    try:
        wait_healthy(port, server)
        (tmp_path / "sec.yaml").write_text(yaml.safe_dump(CONFIG))
        uri = f"http://127.0.0.1:{port}"
        command = [sys.executable, "-m", "ndebench.platform.cli", "run", "sec.yaml", "--tracking-uri", uri]
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
