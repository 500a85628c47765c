"""The ndebench command line: rates, validate (fails before Ray starts), list, help, ui."""
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
import urllib.request
from pathlib import Path

import pytest
import yaml
from ndebench.models.registry import list_models
from ndebench.platform.cli.main import main
from ndebench.regularizers.rates import dropout_rate, expected_renewals

ROOT = Path(__file__).resolve().parents[1]


def test_rates_json_satisfies_both_equations(capsys):
    assert main(["rates", "--p", "0.3", "--m", "10", "--T", "1", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert dropout_rate(out["lambda1"], out["lambda2"], 1.0) == pytest.approx(0.3, rel=1e-9)
    assert expected_renewals(out["lambda1"], out["lambda2"], 1.0) == pytest.approx(10, rel=1e-9)


def test_rates_rejects_bad_p(capsys):
    assert main(["rates", "--p", "1.5", "--m", "10"]) == 2
    assert "p=1.5" in capsys.readouterr().err


@pytest.mark.parametrize("edit,needle", [
    ({"trainng": {"epochs": 2}}, "unknown key 'trainng' in the config's top level (did you mean 'training'?)"),
    ({"regularizers": {"none": {}, "continuum_dropout": {"p": 1.5}}}, "p=1.5"),
    ({"models": ["neural_cdx"]}, "unknown model 'neural_cdx'"),
    ({"datasets": ["sepsys"]}, "datasets: unknown dataset 'sepsys' (did you mean 'sepsis'?); valid: cifar10, "
                                "cifar100, sepsis"),
])
def test_validate_fails_before_ray_with_a_named_problem(tmp_path, monkeypatch, capsys, edit, needle):
    raw = yaml.safe_load((ROOT / "tune_configs" / "quickstart.yaml").read_text())
    raw.update(edit)
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(raw))
    monkeypatch.chdir(tmp_path)
    for command in ("validate", "run"):
        assert main([command, str(path)]) == 2
        out, err = capsys.readouterr()
        assert needle in err
        assert "Ray cluster" not in out + err
        assert not (tmp_path / "mlflow.db").exists()


def test_validate_names_every_second_phase_error_in_one_pass_with_a_dataset_did_you_mean(tmp_path, monkeypatch,
                                                                                         capsys):
    # Review user-530e21d, section 4: a dataset typo, an unknown solver and a refused pairing took a run each.
    (tmp_path / "bad.yaml").write_text(textwrap.dedent("""\
        study: bad
        protocol: joint
        models: [neural_cde, gru_ode]
        datasets: [uea/BasicMotion]
        regularizers: [none, naive_dropout_drift]
        training: {epochs: 2}
        solver:
          method: dopri6
        """))
    monkeypatch.chdir(tmp_path)
    assert main(["validate", "bad.yaml"]) == 2
    lines = capsys.readouterr().err.splitlines()
    assert [line.partition(" ")[0] for line in lines] == ["bad.yaml:8:", "bad.yaml:5:", "bad.yaml:4:", "ndebench"]
    assert lines[0].startswith("bad.yaml:8: solver.method='dopri6' is not a solver; valid: euler,")
    assert lines[1].startswith("bad.yaml:5: regularizer 'naive_dropout_drift' cannot be used with model 'gru_ode'")
    assert lines[2].startswith("bad.yaml:4: datasets: 'uea/BasicMotion' is no set the registry knows and has no "
                               "files in the data directory (did you mean 'uea/BasicMotions'?)")
    assert lines[3] == "ndebench validate: 3 error(s) in bad.yaml; nothing was run"


def test_a_bad_config_exits_2_from_the_shell_with_its_line_and_no_traceback(tmp_path):
    raw = yaml.safe_load((ROOT / "tune_configs" / "quickstart.yaml").read_text())
    raw["models"] = ["neural_cdx"]
    (tmp_path / "bad.yaml").write_text(yaml.safe_dump(raw))
    proc = subprocess.run([sys.executable, "-m", "ndebench.platform", "run", "bad.yaml"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    line = (tmp_path / "bad.yaml").read_text().splitlines().index("- neural_cdx") + 1
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines() == [
        f"bad.yaml:{line}: models: unknown model 'neural_cdx' (did you mean 'neural_cde'?); valid: "
        f"{', '.join(list_models())}", "ndebench run: 1 error(s) in bad.yaml; nothing was run"]
    assert not (tmp_path / "mlflow.db").exists()


def test_validate_summarises_the_quickstart(capsys):
    assert main(["validate", str(ROOT / "tune_configs" / "quickstart.yaml")]) == 0
    out = capsys.readouterr().out
    assert "valid" in out and "neural_cde x uea/BasicMotions x continuum_dropout" in out


@pytest.mark.parametrize("what,name", [("models", "neural_cde"), ("regularizers", "continuum_dropout"),
                                       ("datasets", "uea/BasicMotions")])
def test_list(capsys, what, name):
    assert main(["list", what]) == 0
    assert name in capsys.readouterr().out


@pytest.mark.parametrize("command", ["run", "validate", "report", "ui", "rates", "list"])
def test_every_subcommand_has_help(command, capsys):
    with pytest.raises(SystemExit) as exc:
        main([command, "--help"])
    assert exc.value.code == 0 and "usage: ndebench" in capsys.readouterr().out


@pytest.mark.system
def test_ui_serves_runs_with_their_tags(tmp_path, uri):
    from ndebench.platform.record.recorder import TrialRecorder

    tags = {"study": "uistudy", "phase": "evaluate", "model": "neural_cde", "dataset": "synthetic",
            "regularizer": "none", "seed": "0"}
    TrialRecorder(uri, "uistudy", {"model": "neural_cde"}, "abc", tags).finish("ok", {"test_accuracy": 0.5}, {}, {})
    port = 5000 + os.getpid() % 1000
    proc = subprocess.Popen([sys.executable, "-m", "ndebench.platform", "ui", "--tracking-uri", uri,
                             "--port", str(port)],
                            cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + 120
        while True:
            try:
                urllib.request.urlopen(f"{base}/health", timeout=2)
                break
            except OSError:
                assert time.time() < deadline and proc.poll() is None, "MLflow UI did not start"
                time.sleep(1)
        request = urllib.request.Request(f"{base}/api/2.0/mlflow/experiments/get-by-name?experiment_name=uistudy")
        experiment = json.load(urllib.request.urlopen(request, timeout=10))["experiment"]
        body = json.dumps({"experiment_ids": [experiment["experiment_id"]]}).encode()
        search = urllib.request.Request(f"{base}/api/2.0/mlflow/runs/search", data=body,
                                        headers={"Content-Type": "application/json"})
        runs = json.load(urllib.request.urlopen(search, timeout=10))["runs"]
        run_tags = {t["key"]: t["value"] for t in runs[0]["data"]["tags"]}
        assert run_tags["ndebench.regularizer"] == "none" and run_tags["ndebench.status"] == "ok"
        assert urllib.request.urlopen(base, timeout=10).status == 200
    finally:
        # SIGTERM to `ndebench ui` alone (as a service manager sends it) must stop the MLflow server too.
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
        servers = _processes_with(f"--port {port}")
        for pid in servers:
            os.kill(pid, signal.SIGKILL)
    assert proc.returncode == 128 + signal.SIGTERM
    assert servers == [], "the MLflow server outlived `ndebench ui`"
    with pytest.raises(OSError):
        urllib.request.urlopen(f"{base}/health", timeout=2)


def _processes_with(needle: str) -> list[int]:
    """Ids of live processes whose command line contains ``needle``."""
    pids = []
    for entry in Path("/proc").iterdir():
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except (OSError, ValueError):
            continue
        if entry.name.isdigit() and needle in cmdline and int(entry.name) != os.getpid():
            pids.append(int(entry.name))
    return pids


# Hardening probes (issue 14): one line naming the file or key, exit 2, nothing touched.

def _error_line(capsys) -> str:
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.count("\n") == 1, err
    return err


def test_config_file_errors_name_the_file(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    binary = tmp_path / "binary.yaml"
    binary.write_bytes(b"\x89PNG\r\n\x1a\n\xff\xfe\x00")
    assert main(["validate", str(binary)]) == 2
    assert "binary.yaml' is not a UTF-8 text file" in _error_line(capsys)
    assert main(["validate", str(tmp_path)]) == 2
    assert f"{str(tmp_path)!r} is a directory" in _error_line(capsys)
    assert main(["validate", "missing.yaml"]) == 2
    assert "'missing.yaml' does not exist" in _error_line(capsys)
    locked = tmp_path / "locked.yaml"
    locked.write_text("study: x\n")

    read_text = Path.read_text

    def refuse(self, *args, **kwargs):  # tests run as root, where chmod 000 does not stop reading
        if self == locked:
            raise PermissionError(13, "Permission denied", str(self))
        return read_text(self, *args, **kwargs)

    monkeypatch.setattr(Path, "read_text", refuse)
    assert main(["validate", str(locked)]) == 2
    assert "locked.yaml' cannot be read: Permission denied" in _error_line(capsys)
    assert not (tmp_path / "mlflow.db").exists()


@pytest.mark.parametrize("text,needle", [
    ("study: x\nmodels: neural_cde\ndatasets: [synthetic]\nregularizers: [none]\n",
     "models='neural_cde' must be a list of names"),
    ("study: '..'\nmodels: [neural_cde]\ndatasets: [synthetic]\nregularizers: [none]\n", "study='..' must be a name"),
    ("- just\n- a list\n", "config must be a mapping"),
    ("study: x\nstudy: y\n", "bad.yaml:2: config: duplicate key 'study' (first on line 1)"),
    ("study: [unclosed\n", "not valid YAML"),
    ("", "bad.yaml' is empty"),
    ("study: x\n{a: 1}: 2\n", "bad.yaml:2: not valid YAML: "
                              "while constructing a mapping found unhashable key"),
    ("study: !!python/object:os.system x\n", "could not determine a constructor for the tag"),
    ("study: x\nmodels: [neural_cde]\ndatasets: [synthetic]\nregularizers: [none]\ntraining: {lr: {choice: []}}\n",
     "training.lr.choice needs a list, got []"),
])
def test_bad_config_text_exits_2_with_lines_and_no_traceback(tmp_path, capsys, monkeypatch, text, needle):
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    assert main(["validate", str(path)]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and needle in err, err


def test_report_of_a_missing_study_creates_nothing(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["report", "--study", "nonexistent"]) == 2
    assert "study 'nonexistent' is not in sqlite:///" in _error_line(capsys)
    assert not (tmp_path / "mlflow.db").exists() and not (tmp_path / "reports").exists()
    assert main(["report", "--study", "../up"]) == 2
    assert "study='../up' must be a name" in _error_line(capsys)
    assert main(["report", "--study", "x", "--alpha", "2"]) == 2
    assert "alpha=2" in _error_line(capsys)
    assert list(tmp_path.iterdir()) == []


def test_other_bad_arguments_exit_2(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exc:
        main(["ui", "--port", "99999"])
    assert exc.value.code == 2
    assert "argument --port: '99999' is not a TCP port (1-65535)" in capsys.readouterr().err
    assert main(["datasets", "check", "uea/No pe"]) == 2
    assert "unknown uea dataset 'No pe'" in _error_line(capsys)
    assert main(["datasets", "check", "sepsys"]) == 2
    assert ("ndebench datasets: error: unknown dataset 'sepsys' (did you mean 'sepsis'?); valid datasets: cifar10"
            in _error_line(capsys))
    assert list(tmp_path.iterdir()) == []


def test_ui_prints_the_studys_shared_view_and_its_charts(uri, monkeypatch, capsys):
    import ndebench.platform.server.launch as server
    from fakes import cell_study
    from ndebench.platform.record.tracking import client

    cells = cell_study(uri, "cmp")
    cell_study(uri, "other")  # another study's cells must not appear
    before = []  # what ui printed before its server answered: no link, which would be refused

    def serve(*args, on_ready, **kwargs):
        before.append(capsys.readouterr().out)
        on_ready()
        return 0

    monkeypatch.setattr(server, "serve", serve)
    assert main(["ui", "--tracking-uri", uri, "--study", "cmp", "--port", "5123"]) == 0
    out = capsys.readouterr().out
    assert before[0].startswith(f"MLflow UI for {uri} starting at http://127.0.0.1:5123")
    assert "evaluate runs: " not in before[0] and "evaluate runs: " in out
    runs, = [x.split("evaluate runs: ")[1] for x in out.splitlines() if "evaluate runs: " in x]
    charts, = [x.split("charts of its 2 evaluate cells: ")[1] for x in out.splitlines()
               if "charts of its 2 evaluate cells: " in x]
    experiment = client(uri).get_experiment_by_name("cmp")
    assert runs == (f"http://127.0.0.1:5123/#/experiments/{experiment.experiment_id}/runs?"
                    "viewStateShareKey=ndebench-evaluate-cells&compareRunsMode=TABLE&workflowType=machine_learning")
    assert charts == runs.replace("TABLE", "CHART")
    # The shared view the links open filters the study's evaluate cell runs: exactly its two cells.
    view = json.loads(experiment.tags["mlflow.sharedViewState.ndebench-evaluate-cells"])
    found = client(uri).search_runs([experiment.experiment_id], view["searchFilter"])
    assert sorted(r.info.run_id for r in found) == sorted(c["run_id"] for c in cells.values())
    assert main(["ui", "--tracking-uri", uri, "--study", "nope"]) == 2
    assert "study 'nope' is not in sqlite:///" in capsys.readouterr().err


def test_ui_without_a_study_prints_the_study_list_in_the_model_training_view(uri, monkeypatch, capsys):
    import ndebench.platform.server.launch as server
    from fakes import cell_study
    from ndebench.platform.cli.serving import studies_hint
    from ndebench.platform.record.uiview import studies_url

    assert studies_url("http://h:5") == "http://h:5/#/experiments?workflowType=machine_learning"
    assert studies_hint([]).startswith("no studies yet")
    assert studies_hint(["s"]) == "1 study: s; `ndebench ui --study NAME` opens one's results"
    cell_study(uri, "b-study")
    cell_study(uri, "a-study")
    opened, served = [], []
    monkeypatch.setattr(server, "serve", lambda command, on_ready=None, env=None, **kwargs:
                        served.append((command, env)) or on_ready() or 0)
    monkeypatch.setattr("webbrowser.open", opened.append)
    assert main(["ui", "--tracking-uri", uri, "--port", "5124", "--open"]) == 0
    # Quiet: the host named as allowed (no advice to serve on 0.0.0.0), no INFO or access lines, no Starlette warning.
    (command, env), = served
    assert "127.0.0.1:5124" in command[command.index("--allowed-hosts") + 1].split(",")
    assert command[command.index("--uvicorn-opts") + 1] == "--log-level warning"
    assert env["MLFLOW_LOGGING_LEVEL"] == "WARNING" and env["PYTHONWARNINGS"].startswith("ignore:starlette")
    lines = capsys.readouterr().out.splitlines()
    assert lines[1:] == ["studies: http://127.0.0.1:5124/#/experiments?workflowType=machine_learning",
                         "2 studies: a-study, b-study; `ndebench ui --study NAME` opens one's results"]
    assert opened == ["http://127.0.0.1:5124/#/experiments?workflowType=machine_learning"]
