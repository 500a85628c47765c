"""Least exposure: no secret at rest in the storage path (the sweep's Ray log holds only this job's files, redacted,
owner-only), a tracking server that refuses the credentials is a configuration error (exit 2), and a checkpoint
folder cannot be symlinked out of its trial. Workers that write with a non-admin user granted one study:
``tests/test_worker_credentials.py``."""
from __future__ import annotations

import http.server
import os
import re
import stat
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import pytest
import yaml
from ndebench.platform.cli.main import main
from ndebench.platform.cluster.storage import Storage
from ndebench.platform.cluster.sweeplog import REDACTED, redact, write_private
from ndebench.platform.engine.safepaths import UnsafePathError
from ndebench.platform.engine.trainable import _resume_state, latest_checkpoint
from ndebench.platform.record.tracking import TAG
from ndebench.platform.worker.state import STATE_FILE

SECRET = "correct-horse-battery-staple"
TINY = {"study": "expo", "models": ["neural_cde"], "datasets": ["synthetic"], "regularizers": ["none"],
        "model": {"hidden_size": 8}, "evaluate": {"seeds": [0]},
        "training": {"epochs": 1, "min_epochs": 1, "patience": 1, "lr": 0.01}, "report": {"figures": "none"}}


@pytest.mark.parametrize("line", [
    f"Creating runtime env: {{'env_vars': {{'MLFLOW_TRACKING_PASSWORD': '{SECRET}'}}}}",
    f'{{"env_vars": {{"AWS_SECRET_ACCESS_KEY": "{SECRET}", "X": "1"}}}}',
    f'"{{\\"env_vars\\": {{\\"RAY_AUTH_TOKEN\\": \\"{SECRET}\\"}}}}"',
    f"export MLFLOW_TRACKING_TOKEN={SECRET}; next",
    f"aws_session_token = {SECRET}",
    f"my_api_key: '{SECRET} with spaces'",
    f"tracking at https://lead:{SECRET}@head:5000/api",
])
def test_secret_assignments_are_redacted_whatever_their_quoting(line):
    redacted = redact(line, environ={})
    assert SECRET not in redacted and REDACTED in redacted


def test_values_of_secret_named_variables_are_redacted_anywhere():
    environ = {"MLFLOW_TRACKING_PASSWORD": SECRET, "SOME_DB_CREDENTIAL": "s3cr3t-value", "HOME": "/root",
               "DEBUG_KEY": "1"}
    text = f"the task printed {SECRET} and s3cr3t-value under /root, flag 1"
    assert redact(text, environ) == f"the task printed {REDACTED} and {REDACTED} under /root, flag 1"
    assert redact("epochs=3 lr: 0.01 model=neural_cde", environ) == "epochs=3 lr: 0.01 model=neural_cde"


def test_the_log_file_is_owner_only_from_its_creation(tmp_path, monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", SECRET)
    old = os.umask(0)
    try:
        uri = write_private(Storage(tmp_path), f"password {SECRET}\n", "study", "ray-1.log")
    finally:
        os.umask(old)
    path = tmp_path / "study" / "ray-1.log"
    assert uri == f"{tmp_path}/study/ray-1.log"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and path.read_text() == f"password {REDACTED}\n"


LOG_FOLDER = """
import sys, types
sys.modules["ray"] = types.SimpleNamespace(is_initialized=lambda: True, cluster_resources=lambda: {"CPU": 1.0})
from ndebench.platform.cluster.raysession import RaySession
session = RaySession(None, False, lambda line: None)
session.start()
print(session._driver_log.parent)
assert session._driver_log.parent.is_dir()
""" + "raise SystemExit(int(sys.argv[1]))"


@pytest.mark.parametrize("code", [0, 3])
def test_the_drivers_unredacted_ray_log_leaves_no_folder_behind(tmp_path, code):
    """The driver captures Ray's output in a private temporary folder (only its redacted copy is saved under the
    storage path); the folder goes when the driver exits, whether the sweep succeeded or failed."""
    env = os.environ | {"TMPDIR": str(tmp_path)}
    done = subprocess.run([sys.executable, "-c", LOG_FOLDER, str(code)], env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == code, done.stderr
    folder = Path(done.stdout.strip())
    assert folder.parent == tmp_path and folder.name.startswith("ndebench-")
    assert not folder.exists() and not list(tmp_path.iterdir())

def test_a_checkpoint_folder_symlinked_out_of_its_trial_is_refused(tmp_path):
    import torch

    storage = Storage(tmp_path / "root")
    trial = tmp_path / "root/s/evaluate-1/t"
    (trial / "checkpoint_000001").mkdir(parents=True)
    torch.save({"epoch": 1}, trial / "checkpoint_000001" / STATE_FILE)
    other = tmp_path / "root/s/evaluate-1/other/checkpoint_000007"
    other.mkdir(parents=True)
    torch.save({"epoch": 7}, other / STATE_FILE)
    assert latest_checkpoint(storage, "s", "s/evaluate-1/t")[0] == {"epoch": 1}
    (trial / "checkpoint_000002").symlink_to(other)  # inside the storage root, outside the trial
    with pytest.raises(UnsafePathError, match="checkpoint_000002.*outside its trial folder"):
        latest_checkpoint(storage, "s", "s/evaluate-1/t")
    state, note = _resume_state(storage, "s", {f"{TAG}trial_dir": "s/evaluate-1/t"})
    assert state is None and note.startswith("refused: checkpoint ") and note.endswith("starts from scratch")


def test_a_symlinked_state_file_is_refused(tmp_path):
    storage = Storage(tmp_path / "root")
    folder = tmp_path / "root/s/evaluate-1/t/checkpoint_000001"
    folder.mkdir(parents=True)
    (tmp_path / "elsewhere.pt").write_bytes(b"x")
    (folder / STATE_FILE).symlink_to(tmp_path / "elsewhere.pt")
    with pytest.raises(UnsafePathError, match="outside its trial folder"):
        latest_checkpoint(storage, "s", "s/evaluate-1/t")


class _Refusing(http.server.BaseHTTPRequestHandler):
    status = 401

    def _answer(self) -> None:
        body = b"You are not authenticated." if self.status == 401 else b"Permission denied"
        self.send_response(self.status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = _answer

    def log_message(self, *args: object) -> None:
        pass


@pytest.mark.parametrize(("status", "says"), [(401, "refused the credentials (HTTP 401, user 'ana'"),
                                              (403, "denied user 'ana' ($MLFLOW_TRACKING_USERNAME) this study (HTTP "
                                                    "403): its admin grants it with `ndebench grant")])
def test_refused_credentials_exit_2_naming_them_not_3(status, says, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MLFLOW_TRACKING_USERNAME", "ana")
    monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", SECRET)
    handler = type("Handler", (_Refusing,), {"status": status})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    uri = f"http://127.0.0.1:{server.server_address[1]}"
    (tmp_path / "expo.yaml").write_text(yaml.safe_dump(TINY))
    try:
        code = main(["run", "expo.yaml", "--tracking-uri", uri, "--storage-path", str(tmp_path / "ray")])
    finally:
        server.shutdown()
    err = capsys.readouterr().err
    ours = [line for line in err.splitlines() if line.startswith("ndebench ")]
    assert code == 2 and len(ours) == 1, err
    assert ours[0].startswith(f"ndebench run: error: the tracking server {uri} ") and says in ours[0]
    assert SECRET not in err and "Traceback" not in err


def test_grant_refuses_a_database_uri_and_the_admins_own_name(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MLFLOW_TRACKING_USERNAME", "lead")
    assert main(["grant", "--tracking-uri", f"sqlite:///{tmp_path / 'm.db'}", "--study", "s", "--user", "w"]) == 2
    assert "users exist on a tracking server run with `ndebench server --auth`" in capsys.readouterr().err
    assert main(["grant", "--tracking-uri", "http://127.0.0.1:9", "--study", "s", "--user", "lead"]) == 2
    assert "--user 'lead' is the admin account" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def _files(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file() and not p.is_symlink()]


@pytest.mark.system
def test_a_password_in_a_jobs_env_vars_never_reaches_storage(tmp_path):
    """The review's path: a job whose runtime env carries MLFLOW_TRACKING_PASSWORD (Ray's runtime-env agent logs
    it) and whose tasks print it; the sweep's log under the storage path holds neither, and is owner-only."""
    ray_temp = tempfile.mkdtemp(prefix="expo", dir="/tmp")  # short: Ray's socket paths
    (tmp_path / "expo.yaml").write_text(yaml.safe_dump(TINY))
    driver = f"""
import os, sys, ray
env = {{"MLFLOW_TRACKING_PASSWORD": {SECRET!r}, "AWS_SECRET_ACCESS_KEY": "aws-{SECRET}"}}
os.environ.update(env)  # as in a Ray Job's driver, whose env_vars reach its own environment too
ray.init(num_cpus=1, include_dashboard=False, _temp_dir={ray_temp!r}, runtime_env={{"env_vars": env}})
@ray.remote
def leak():
    print("worker sees", os.environ["MLFLOW_TRACKING_PASSWORD"], "and MLFLOW_TRACKING_PASSWORD=" +
          os.environ["MLFLOW_TRACKING_PASSWORD"])
ray.get(leak.remote())
from ndebench.platform.cli.main import main
sys.exit(main(["run", "expo.yaml", "--storage-path", {str(tmp_path / "storage")!r},
               "--tracking-uri", {f"sqlite:///{tmp_path / 'mlflow.db'}"!r}, "--out", {str(tmp_path / "out")!r}]))
"""
    try:
        done = subprocess.run([sys.executable, "-c", driver], cwd=tmp_path, capture_output=True, text=True,
                              timeout=900)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        # The leak path is real: Ray's own logs hold the password.
        assert any(SECRET in p.read_text(errors="replace") for p in _files(Path(ray_temp)))
    finally:
        subprocess.run(["rm", "-rf", ray_temp], check=False)
    leaks = [str(p) for p in _files(tmp_path) if SECRET.encode() in p.read_bytes()]
    assert leaks == []
    logs = list((tmp_path / "storage" / "expo").glob("ray-*.log"))
    assert len(logs) == 1 and stat.S_IMODE(logs[0].stat().st_mode) == 0o600
    text = logs[0].read_text()
    assert f"MLFLOW_TRACKING_PASSWORD={REDACTED}" in text and "worker sees [redacted]" in text
    sections = re.findall(r"^===== (\S+) =====$", text, re.MULTILINE)
    assert "console.log" in sections and any(name.startswith("worker-") for name in sections)
    assert all(name in ("driver.log", "console.log") or name.startswith(("worker-", "python-core-"))
               for name in sections), sections
