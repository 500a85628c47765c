"""Fakes shared by several test files: archive writers for every dataset family, a plugin distribution, a trial
recorded as a worker records it and a crafted analysis study."""
from __future__ import annotations

import contextlib
import io
import os
import pickle
import signal
import socket
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
import scipy.io
from scipy.io import wavfile


def poison_training_set(monkeypatch, seed: int) -> None:
    """Trials built with ``seed`` get a training split whose 4th time step is infinite, so their loss diverges."""
    import ndebench.platform.worker.build as build_module
    from ndebench.datasets.registry import create_dataset

    def poisoned(name, **kwargs):
        bundle = create_dataset(name, **kwargs)
        if kwargs["seed"] == seed:
            bundle.train.values[:, 3, :] = np.inf
        return bundle

    monkeypatch.setattr(build_module, "create_dataset", poisoned)


def without_fingerprint(table_md: str) -> str:
    """``table_md`` less its study-fingerprint line: the fingerprint hashes the record (run ids, lease epochs), so
    two recordings of the same results differ there and nowhere else."""
    return "\n".join(line for line in table_md.split("\n") if not line.startswith("Study fingerprint "))


def local_ray_arguments(num_cpus: int, **extra) -> dict:
    """``ray.init``'s arguments for an in-process test Ray: the driver's own local Ray (``init_arguments``) with
    ``num_cpus`` CPUs and a smaller object store, plus ``extra`` (a ``runtime_env``)."""
    from ndebench.platform.cluster.joining import init_arguments

    return init_arguments(None, verbose=False) | {"num_cpus": num_cpus, "object_store_memory": 150 * 1024**2} | extra


# Devices a device-dependent test runs on: the CPU always, CUDA as a ``gpu`` test (skipped without a device).
DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.gpu, id="cuda")]

# UEA/UCR

def write_ts(path, samples, labels, *, equal_length=True):
    """A ``.ts`` file in the archive's format: one line per sample, channels separated by ':'."""
    header = [
        "# generated for a test",
        f"@problemName {path.stem}",
        "@timeStamps false",
        "@missing false",
        f"@univariate {'true' if len(samples[0]) == 1 else 'false'}",
        f"@dimensions {len(samples[0])}",
        f"@equalLength {'true' if equal_length else 'false'}",
        *([f"@seriesLength {len(samples[0][0])}"] if equal_length else []),
        f"@classLabel true {' '.join(sorted(set(labels)))}",
        "@data",
    ]
    rows = [
        ":".join(",".join(repr(float(v)) for v in channel) for channel in sample) + f":{label}"
        for sample, label in zip(samples, labels, strict=True)
    ]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(header + rows) + "\n")


# PhysioNet Sepsis

HEADER = (
    "HR|O2Sat|Temp|SBP|MAP|DBP|Resp|EtCO2|BaseExcess|HCO3|FiO2|pH|PaCO2|SaO2|AST|BUN|Alkalinephos|Calcium|"
    "Chloride|Creatinine|Bilirubin_direct|Glucose|Lactate|Magnesium|Phosphate|Potassium|Bilirubin_total|"
    "TroponinI|Hct|Hgb|PTT|WBC|Fibrinogen|Platelets|Age|Gender|Unit1|Unit2|HospAdmTime|ICULOS|SepsisLabel"
)


def fmt(value: float) -> str:
    return "NaN" if np.isnan(value) else f"{value:.2f}"


def make_stays(root, rng):
    """Write 60 stays and return the expected (values (72, 34), static (5,), label) of those kept."""
    expected = []
    for index in range(60):
        folder = "training_setA" if index < 40 else "training_setB"
        length = [2, 90, 80][index] if index < 3 else int(rng.integers(3, 100))
        hours = np.arange(1, length + 1)
        if index % 5 == 0 and length > 6:
            hours = np.delete(hours, [3, 4])  # a gap: ICULOS jumps from 3 to 6
        onset = {1: 80, 2: 50}.get(index, int(rng.integers(10, 90)) if index % 3 == 0 else None)
        features = np.where(rng.random((len(hours), 34)) < 0.6, np.nan, rng.normal(50, 10, (len(hours), 34)).round(2))
        unit = [np.nan, np.nan] if index % 4 == 0 else [float(index % 2), float(1 - index % 2)]
        admitted = np.nan if index % 7 == 0 else -round(rng.uniform(0, 50), 2)
        static = [round(rng.uniform(20, 90), 2), float(index % 2), *unit, admitted]
        lines = [HEADER]
        for row, hour in zip(features, hours, strict=True):
            label = 1.0 if onset is not None and hour >= onset else 0.0
            lines.append("|".join(fmt(v) for v in [*row, *static, float(hour), label]))
        path = root / folder / f"p{index:06d}.psv"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("\n".join(lines) + "\n")
        kept = hours <= 72
        if kept.sum() > 2:
            values = np.full((72, 34), np.nan)
            values[hours[kept] - 1] = features[kept]
            label = float(onset is not None and bool((hours[kept] >= onset).any()))
            expected.append((values, np.array(static), label))
    return expected


# Speech Commands

def write_clip(path, samples: int, frequency: float, rng) -> None:
    t = np.arange(samples) / 16000
    audio = 0.3 * np.sin(2 * np.pi * frequency * t) + 0.05 * rng.standard_normal(samples)
    path.parent.mkdir(parents=True, exist_ok=True)
    wavfile.write(path, 16000, (audio * 2**15).astype(np.int16))


# CIFAR-10/100, SVHN, STL-10

TRAIN, TEST = 60, 20


def cifar_batch(rng, n, classes, key):
    """A CIFAR pickle batch: ``data`` uint8 (n, 3072) channel-major, labels cycling through the classes."""
    return {"data": rng.integers(0, 256, (n, 3072), dtype=np.uint8), key: [i % classes for i in range(n)]}


def write_pickle(path: Path, obj) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(pickle.dumps(obj))


def make_cifar10(root, rng):
    folder = root / "cifar10" / "cifar-10-batches-py"
    batches = [cifar_batch(rng, TRAIN // 5, 10, "labels") for _ in range(5)]
    for i, batch in enumerate(batches, 1):
        write_pickle(folder / f"data_batch_{i}", batch)
    test = cifar_batch(rng, TEST, 10, "labels")
    write_pickle(folder / "test_batch", test)
    write_pickle(folder / "batches.meta", {"label_names": [f"c{i}" for i in range(10)]})
    pixels = np.concatenate([b["data"] for b in batches]).reshape(-1, 3, 32, 32)
    return pixels, np.concatenate([b["labels"] for b in batches])


def make_cifar100(root, rng):
    folder = root / "cifar100" / "cifar-100-python"
    train = cifar_batch(rng, TRAIN * 4, 100, "fine_labels")  # every class needs images
    write_pickle(folder / "train", train)
    write_pickle(folder / "test", cifar_batch(rng, TEST, 100, "fine_labels"))
    write_pickle(folder / "meta", {"fine_label_names": [f"f{i}" for i in range(100)], "coarse_label_names": ["c"]})
    return train["data"].reshape(-1, 3, 32, 32), np.arange(TRAIN * 4) % 100


def make_svhn(root, rng):
    folder = root / "svhn"
    folder.mkdir(parents=True)
    out = None
    for split, n in (("train", TRAIN), ("test", TEST)):
        x = rng.integers(0, 256, (32, 32, 3, n), dtype=np.uint8)
        y = (np.arange(n) % 10 + 1).reshape(-1, 1)  # 1..10, 10 is the digit 0
        scipy.io.savemat(folder / f"{split}_32x32.mat", {"X": x, "y": y})
        if split == "train":
            out = (x.transpose(3, 2, 0, 1), y[:, 0] % 10)
    return out


def make_stl10(root, rng):
    folder = root / "stl10" / "stl10_binary"
    folder.mkdir(parents=True)
    out = None
    for split, n in (("train", TRAIN // 3), ("test", TEST // 2)):
        x = rng.integers(0, 256, (n, 3, 96, 96), dtype=np.uint8)
        # STL-10 stores images column-major: each channel is the transposed 96x96 array
        x.transpose(0, 1, 3, 2).tofile(folder / f"{split}_X.bin")
        (np.arange(n, dtype=np.uint8) % 10 + 1).tofile(folder / f"{split}_y.bin")
        if split == "train":
            out = (x, np.arange(n) % 10)
    (folder / "unlabeled_X.bin").write_bytes(b"")
    return out


MAKERS = {"cifar10": make_cifar10, "cifar100": make_cifar100, "svhn": make_svhn, "stl10": make_stl10}
SIZES = {
    "cifar10": (TRAIN, TEST), "cifar100": (TRAIN * 4, TEST), "svhn": (TRAIN, TEST), "stl10": (TRAIN // 3, TEST // 2),
}


# Entry-point plugins

def make_plugin(root: Path, body: str, module: str = "ndebench_testplugin") -> dict[str, str]:
    """A distribution on ``root`` whose module ``module`` is ``body`` (registering components under the three
    entry-point groups); returns the environment that puts it on ``PYTHONPATH``. Tests that share a worker
    process give their plugins different module names: an imported module is not imported again."""
    (root / module).mkdir(parents=True)
    (root / module / "__init__.py").write_text(textwrap.dedent(body))
    info = root / f"{module}-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {module.replace('_', '-')}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(
        "".join(f"[ndebench.{group}]\nplugin = {module}\n\n" for group in ("models", "regularizers", "datasets"))
    )
    return dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")])))


def record_trial(uri: str, study: str, regularizer: str, seed: int, *, phase: str = "evaluate",
                 dataset: str = "synthetic", metric: str | None = "accuracy", variant: str = "",
                 params: dict[str, Any] | None = None, config_hash: str | None = None,
                 epochs: Sequence[dict[str, float]] = (), status: str | None = "ok",
                 metrics: dict[str, float] | None = None, tags: dict[str, Any] | None = None) -> Any:
    """One trial of ``neural_cde`` on ``dataset`` recorded through ``TrialRecorder`` as a worker records it, without
    Ray: its identity tags (``metric`` ``None`` leaves that tag out), config ``{regularizer, seed}`` with
    ``params``, ``config_hash`` by default ``<variant or regularizer>-<seed>``, ``epochs`` logged at steps 1, 2, ...,
    then ``finish(status, metrics, tags)``; ``status`` ``None`` leaves the run running, as a worker killed
    mid-trial does. Returns the recorder (``.run_id``)."""
    from ndebench.platform.record.recorder import TrialRecorder

    identity = {"study": study, "phase": phase, "model": "neural_cde", "dataset": dataset, "regularizer": regularizer,
                "seed": str(seed), **({"metric": metric} if metric else {})} | ({"variant": variant} if variant else {})
    recorder = TrialRecorder(uri, study, {"regularizer": regularizer, "seed": seed, **(params or {})},
                             config_hash or f"{variant or regularizer}-{seed}", identity)
    for step, values in enumerate(epochs, start=1):
        recorder.log_metrics(values, step=step)
    if status is not None:
        recorder.finish(status, metrics or {}, tags or {}, {})
    return recorder


def log_evaluate_runs(uri: str, study: str, runs: list[dict]) -> None:
    """Record ``ok`` evaluate trial runs as the sweep tags them, without Ray: each of ``runs`` names its ``model,
    dataset, regularizer, seed``, optionally its ``variant``, its regularizer ``params`` (logged as
    ``regularizer.<key>``) and its final ``metrics``; the dataset's primary metric is accuracy."""
    from mlflow.entities import Metric, Param
    from ndebench.platform.record import tracking

    client = tracking.client(uri)
    experiment = tracking.ensure_experiment(uri, study)
    for run in runs:
        tags = {f"ndebench.{k}": str(run[k]) for k in ("model", "dataset", "regularizer", "seed")}
        tags |= {"ndebench.status": "ok", "ndebench.phase": "evaluate", "ndebench.metric": "accuracy"}
        tags |= {"ndebench.variant": run["variant"]} if run.get("variant") else {}
        run_id = client.create_run(experiment, tags=tags).info.run_id
        client.log_batch(run_id, metrics=[Metric(k, v, 0, 0) for k, v in run["metrics"].items()],
                         params=[Param(f"regularizer.{k}", str(v)) for k, v in run.get("params", {}).items()])
        client.set_terminated(run_id, "FINISHED")


def log_study_frame(uri: str, study: str, frame: pd.DataFrame) -> None:
    """Record a frame of :func:`study_frame`'s columns (the crafted study) as ``study``'s evaluate runs, as the sweep
    does: identity tags, flat params, two epochs of train_time_s (their mean is the frame's value), final test
    metrics."""
    from mlflow.entities import Metric, Param
    from ndebench.platform.record import tracking

    client = tracking.client(uri)
    experiment = tracking.ensure_experiment(uri, study)
    for row in frame.itertuples(index=False):
        tags = {f"ndebench.{k}": str(getattr(row, k)) for k in ("model", "dataset", "regularizer", "seed", "status")}
        tags |= {"ndebench.phase": "evaluate", **({"ndebench.variant": row.variant} if row.variant else {})}
        run_id = client.create_run(experiment, tags=tags).info.run_id
        # As the plan writes them: a variant's label and its params are the same values' texts.
        params = [Param(f"regularizer.{k}", f"{getattr(row, k):g}") for k in ("p", "m", "rate")
                  if np.isfinite(getattr(row, k))]
        metrics = [Metric("test_accuracy", row.test_accuracy, 0, 0), Metric("test_nll", row.test_nll, 0, 0)]
        metrics += [Metric("train_time_s", row.train_time_s + d, 0, step) for step, d in ((1, -0.5), (2, 0.5))]
        metrics += [Metric("epoch_time_s", row.epoch_time_s, 0, 1)]
        client.log_batch(run_id, metrics=metrics, params=params + [Param("model", row.model)])
        client.set_terminated(run_id, "FINISHED")


# A crafted study: two models, three datasets, `none`, Continuum Dropout variants over a 2 x 2 (p, m)
# grid and jump diffusion over two rates, two seeds each.

MODELS = ("neural_cde", "neural_ode")
DATASETS = ("ArrowHead", "BasicMotions", "GunPoint")
CHANNELS = {"ArrowHead": 1, "BasicMotions": 6, "GunPoint": 1}
GRID = [(0.1, 5.0), (0.1, 50.0), (0.5, 5.0), (0.5, 50.0)]
RATES = (0.01, 0.1)
SEEDS = (0, 1)


def _variant(p: float, m: float) -> str:
    return f"continuum_dropout[p={p:g},m={m:g}]"


def study_frame(seed: int = 0) -> pd.DataFrame:
    """One row per evaluate run with the columns of :func:`ndebench.platform.record.runs.runs_frame`. The
    (p=0.5, m=5) variant is 0.1 worse than ``none`` (a red cell); the others are 0.02-0.05 better."""
    rng = np.random.default_rng(seed)
    rows = []
    for i, model in enumerate(MODELS):
        for j, dataset in enumerate(DATASETS):
            base = 0.6 + 0.05 * i + 0.03 * j
            cells = [("none", "", np.nan, np.nan, np.nan, 0.0, 10.0)]
            cells += [("continuum_dropout", _variant(p, m), p, m, np.nan,
                       -0.1 if (p, m) == (0.5, 5.0) else 0.02 + 0.03 * (m == 50.0), 11.0 + p)
                      for p, m in GRID]
            cells += [("jump_diffusion", f"jump_diffusion[rate={r:g}]", np.nan, np.nan, r, 0.01 * k, 10.5)
                      for k, r in enumerate(RATES)]
            for regularizer, variant, p, m, rate, shift, seconds in cells:
                for s in SEEDS:
                    acc = base + shift + rng.normal(0, 0.01)
                    rows.append({
                        "run_id": f"{model}-{dataset}-{variant or regularizer}-{s}", "parent_run_id": "",
                        "study": "crafted", "model": model, "dataset": dataset, "regularizer": regularizer,
                        "variant": variant, "label": variant or regularizer, "seed": s, "status": "ok",
                        "n_mc": 0, "p": p, "m": m, "rate": rate, "test_accuracy": acc,
                        "test_nll": 1.0 - acc + rng.normal(0, 0.01),
                        "train_time_s": seconds * (1 + 0.2 * i) + rng.normal(0, 0.1),
                        "epoch_time_s": seconds * (1 + 0.2 * i) + 2.0,
                        "channels": CHANNELS[dataset],
                    })
    return pd.DataFrame(rows)


def wait_healthy(port: int, process: subprocess.Popen, seconds: float = 120) -> None:
    """Until the MLflow server ``process`` answers on ``/health`` at ``port``; fails when it died or took longer."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2):
                return
        except OSError:
            assert process.poll() is None and time.monotonic() < deadline, f"the server did not start in {seconds} s"
            time.sleep(0.5)


def read_until(process: subprocess.Popen, text: str, lines: int = 500) -> str:
    """``process``'s text stdout up to and including the first line containing ``text`` (at most ``lines``)."""
    seen = []
    for _ in range(lines):
        seen.append(process.stdout.readline())
        if text in seen[-1] or not seen[-1]:
            break
    return "".join(seen)


def drain(process: subprocess.Popen) -> None:
    """Read ``process``'s stdout to its end in a daemon thread: a server whose log fills an unread pipe (64 KiB)
    blocks in its next write, and every request it serves then hangs."""
    threading.Thread(target=process.stdout.read, daemon=True).start()


@contextlib.contextmanager
def auth_server(cwd: Path, env: dict[str, str]):
    """An ``ndebench server --auth`` on a free loopback port, started as the admin of ``env``; yields its URI."""
    port = free_port()
    server = subprocess.Popen([sys.executable, "-m", "ndebench.platform", "server", "--auth", "--port", str(port),
                               "--workers", "1"], cwd=cwd, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        assert "listening on" in read_until(server, "listening on")
        drain(server)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.terminate()
        server.wait(timeout=30)


def cli(args: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    """``ndebench ARGS`` as a process in ``cwd`` with exactly the environment ``env`` would run it (exit code,
    stdout, stderr), but through ``main`` in this process: a new interpreter's imports cost 4-6 s of CPU for
    ``report`` and ``verify``. For commands that start no Ray, server or UI (a driver refused before Ray starts
    included); a sweep, a server or a UI gets its own process."""
    from ndebench.platform.cli.main import main

    out, err = io.StringIO(), io.StringIO()
    saved_env, saved_cwd = dict(os.environ), os.getcwd()
    os.environ.clear()
    os.environ.update(env)
    os.chdir(cwd)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main(args)
            except SystemExit as exit_:  # argparse's usage errors
                code = exit_.code
    finally:
        os.environ.clear()
        os.environ.update(saved_env)
        os.chdir(saved_cwd)
    return subprocess.CompletedProcess(["ndebench", *args], code, out.getvalue(), err.getvalue())


_HANDED_OUT: set[int] = set()


def free_port() -> int:
    """A port free now and not handed out before in this process: the kernel may give a just-closed port again,
    and a test that asked for a cluster's GCS and dashboard ports in a row once got the same one for both."""
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port not in _HANDED_OUT:
            _HANDED_OUT.add(port)
            return port


def start_server(cwd: Path) -> tuple[int, subprocess.Popen]:
    """``ndebench server`` with one worker on a free port, in its own process group; the port and process."""
    port = free_port()
    process = subprocess.Popen([sys.executable, "-m", "ndebench.platform", "server", "--port", str(port),
                                "--workers", "1"], cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True, start_new_session=True)
    return port, process


def processes_mentioning(text: str) -> list[int]:
    """Every process but this one whose command line, or one of whose open files, contains ``text`` (a private
    temp dir, a port). Ray retitles its agents (``ray::DashboardAgent``), but their logs stay open in the temp dir."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                opened = " ".join(os.readlink(fd) for fd in (entry / "fd").iterdir() if fd.is_symlink())
                if text.encode() in (entry / "cmdline").read_bytes() or text in opened:
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def kill(pids: list[int]) -> None:
    """SIGKILL each of ``pids`` that still exists."""
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def wait_http(url: str, seconds: float) -> None:
    """Until ``url`` answers; fails after ``seconds``."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            with urllib.request.urlopen(url, timeout=2):
                return
        except OSError:
            assert time.monotonic() < deadline, f"{url} did not answer within {seconds:.0f} s"
            time.sleep(0.5)


def agent_ports() -> list[str]:
    """Fresh ports for a node's agents: Ray's defaults (e.g. 52365) collide with another cluster started on this
    machine at the same time (the other cluster test in the other xdist worker), and the head then has no job agent."""
    return ["--dashboard-agent-listen-port", str(free_port()), "--dashboard-agent-grpc-port", str(free_port()),
            "--runtime-env-agent-port", str(free_port()), "--metrics-export-port", str(free_port())]


def cell_study(uri: str, study: str, lrs: tuple[float, float] = (0.01, 0.01)) -> dict[str, dict]:
    """A study's MLflow runs as a sweep leaves them, without Ray: the study run, a tune cell run and an evaluate cell
    run per regularizer (``none``, ``continuum_dropout``, trained at learning rates ``lrs``), the evaluate ones
    closed with their aggregates in the engine's order. Returns each evaluate cell run's id, params and metrics by
    cell key."""
    from ndebench.platform.record.tracking import cell_run, ensure_experiment, finish_cell, study_run

    ensure_experiment(uri, study)
    parent = study_run(uri, study, description="crafted", params={}, yaml_text=None)
    cells = {}
    for i, regularizer in enumerate(("none", "continuum_dropout")):
        key = f"neural_lsde__synthetic__{regularizer}"
        tags = {"model": "neural_lsde", "dataset": "synthetic", "regularizer": regularizer, "metric": "accuracy"}
        params = {"training.lr": lrs[i]} | ({"regularizer.p": 0.3, "regularizer.m": 10} if i else {})
        tune = cell_run(uri, study, parent, "tune", key, tags)
        finish_cell(uri, tune, "done", params={k: v for k, v in params.items() if k.startswith("regularizer.")})
        metrics = {"mean_test_accuracy": 0.8125 + 0.0625 * i, "std_test_accuracy": 0.03125}
        metrics |= {"diff_vs_none": 0.0625, "diff_ci_low": 0.015625, "diff_ci_high": 0.109375,
                    "p_value_vs_none": 0.0234375} if i else {}
        run_id = cell_run(uri, study, parent, "evaluate", key, tags)
        finish_cell(uri, run_id, "done", params=params, metrics=metrics | {"n": 5.0})
        cells[key] = {"run_id": run_id, "params": params, "metrics": metrics}
    return cells


def count_rows(db: Path, sql: str, *args: str) -> int:
    """The count that ``sql`` (a ``select count(...)`` with ``?`` for ``args``) reads from the sqlite store ``db``
    while a sweep writes it: 0 where the store does not exist yet or is locked."""
    if not db.exists():
        return 0
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=1) as connection:
            return connection.execute(sql, args).fetchone()[0]
    except sqlite3.Error:
        return 0


def epochs_logged(db: Path, phase: str) -> int:
    """Epochs of training (``train_loss`` at steps 1, 2, ...) logged by the runs of ``phase`` in the sqlite store
    ``db`` (:func:`count_rows`)."""
    return count_rows(db, "select count(*) from metrics m join tags t on t.run_uuid = m.run_uuid where m.key = "
                          "'train_loss' and m.step > 0 and t.key = 'ndebench.phase' and t.value = ?", phase)


# Infrastructure failures inside a trial, injected in the Ray worker through a `plugins:` module

FAULT_PLUGIN = '''
import errno, os, pathlib

import ndebench.platform.engine.trainable as trainable_module
import torch
from mlflow.exceptions import MlflowException
from mlflow.tracking import MlflowClient

STATE = pathlib.Path({state!r})
FAULTS = {faults!r}
STORM = ("API request to http://127.0.0.1:5000/api/2.0/mlflow/runs/log-batch failed with exception "
         "HTTPConnectionPool(host='127.0.0.1', port=5000): Max retries exceeded (Caused by ResponseError('too many "
         "503 error responses'))")


def _fire(fault):
    """Whether this attempt fails with ``fault``: every attempt while STATE/forever exists, else the first one
    that reaches it only."""
    if (STATE / "off").exists():
        return False
    if (STATE / "forever").exists():
        return True
    try:
        os.close(os.open(STATE / f"fired-{{fault}}", os.O_CREAT | os.O_EXCL))
        return True
    except FileExistsError:
        return False


restored = trainable_module._restored


def _restored():
    state, run_id = restored()
    with open(STATE / "attempts", "a") as log:
        log.write(f"{{state['epoch'] if state else 0}}\\n")
    return state, run_id


logged, saved = MlflowClient.log_batch, torch.save


def log_batch(self, run_id, metrics=(), *args, **kwargs):
    if "storm" in FAULTS and any(m.step == FAULTS["storm"] for m in metrics) and _fire("storm"):
        raise MlflowException(STORM)
    return logged(self, run_id, metrics, *args, **kwargs)


def save(obj, path, *args, **kwargs):
    for fault, code in (("enospc", errno.ENOSPC), ("eio", errno.EIO)):
        if str(path).endswith("trial_state.pt") and FAULTS.get(fault) == obj["epoch"] and _fire(fault):
            raise OSError(code, os.strerror(code), str(path))
    return saved(obj, path, *args, **kwargs)


trainable_module._restored, MlflowClient.log_batch, torch.save = _restored, log_batch, save
'''


def write_fault_plugin(root: Path, faults: dict[str, int], forever: bool = False) -> Path:
    """Module ``faultplugin`` in ``root`` (a sweep's working folder; list it under ``plugins:``): in the trial's
    worker, each fault of ``faults`` (``storm``: MLflow's client failing as after its retries on 503 answers;
    ``enospc``/``eio``: the checkpoint write failing) hits at its epoch of the first attempt that reaches it
    (leaving ``<state>/fired-<fault>``), or of every attempt while ``forever`` (the file ``<state>/forever``);
    ``<state>/off`` turns them off. Each attempt appends the epoch it restored (0: none) to ``<state>/attempts``.
    Returns the state folder."""
    state = root / "faultstate"
    state.mkdir()
    if forever:
        (state / "forever").touch()
    (root / "faultplugin.py").write_text(FAULT_PLUGIN.format(state=str(state), faults=faults))
    return state
