"""``dataset_status`` / ``check_dataset`` (behind ``ndebench datasets``) and the preprocessing cache."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from ndebench.datasets.cache import cache_path, cached
from ndebench.datasets.check import (
    check_dataset,
    dataset_status,
    dataset_statuses,
    describe_shape,
    preflight_problems,
)
from ndebench.datasets.registry import dataset_info, list_datasets, register_dataset, split_name
from ndebench.platform.common.registry import UnknownNameError


def test_statuses_cover_every_dataset_without_files(tmp_path):
    statuses = {s["name"]: s for s in dataset_statuses(tmp_path)}
    assert list(statuses) == list_datasets()
    assert statuses["synthetic"]["available"] and statuses["uea/BasicMotions"]["available"]
    assert statuses["uea/BasicMotions"]["source"].startswith("sktime package")
    assert statuses["uea/BasicMotions"]["shape"] == "80 x 100 x 6, 4 classes"
    for name in ("uea/Car", "speech_commands", "sepsis", "cifar10", "cifar100", "svhn", "stl10"):
        assert not statuses[name]["available"] and statuses[name]["source"] is None
        assert str(tmp_path) in statuses[name]["problem"]
    assert statuses["cifar100"]["shape"] == "50000 + 10000 images 3x32x32, 100 classes"
    assert statuses["uea/JapaneseVowels"]["shape"] == "640 x L (unequal lengths) x 12, 9 classes"
    assert all(s["data_dir"] == str(tmp_path.resolve()) for s in statuses.values())


@pytest.mark.parametrize("name", ["synthetic", "uea/BasicMotions", "uea/JapaneseVowels"])
def test_check_passes_on_intact_data(name):
    assert check_dataset(name) == []


def test_check_reports_missing_files(tmp_path):
    problems = check_dataset("uea/Car", tmp_path)
    assert len(problems) == 1 and str(tmp_path / "Car" / "Car_TRAIN.ts") in problems[0]


def test_check_reports_counts_and_lengths_that_differ_from_the_archive(tmp_path):
    rng = np.random.default_rng(0)
    header = (
        "@problemName Coffee\n@timeStamps false\n@missing false\n@univariate true\n@equalLength true\n"
        "@seriesLength 9\n@classLabel true a b c\n@data\n"
    )
    for split in ("TRAIN", "TEST"):
        rows = [",".join(f"{v:.3f}" for v in rng.normal(size=9)) + f":{label}" for label in "abc" * 6]
        (tmp_path / "Coffee").mkdir(exist_ok=True)
        (tmp_path / "Coffee" / f"Coffee_{split}.ts").write_text(header + "\n".join(rows) + "\n")
    assert check_dataset("uea/Coffee", tmp_path) == [
        "36 samples, the archive has 56", "3 classes, the archive has 2", "length 9, the archive has 286",
    ]


def test_describe_shape_unknown_and_partial():
    assert describe_shape({}) == "unknown"
    assert describe_shape({"classes": 3}) == "? x ? x ?, 3 classes"
    assert describe_shape({"samples": 10, "length": None, "channels": 2}) == "10 x L (unequal lengths) x 2"
    assert describe_shape({"image_size": (8, 8), "train": 5}) == "5 + ? images ?x8x8"


@pytest.mark.parametrize("name,metric,missing,shape", [
    ("synthetic", "accuracy", False, "96 x 32 x 2, 3 classes"),
    ("uea/Coffee", "accuracy", False, "56 x 286 x 1, 2 classes"),
    ("sepsis", "auroc", True, "40336 records x 72 x 34, 2 classes"),
    ("speech_commands", "accuracy", False, "34975 x 161 x 20, 10 classes"),
    ("cifar10", "accuracy", False, "50000 + 10000 images 3x32x32, 10 classes"),
    ("cifar100", "top5_accuracy", False, "50000 + 10000 images 3x32x32, 100 classes"),
])
def test_each_dataset_registers_its_facts(name, metric, missing, shape):
    info = dataset_info(name)
    assert (info.metric, info.missing_values, describe_shape(info.expected)) == (metric, missing, shape)
    assert info.member == (name.split("/")[1] if "/" in name else None)


def test_registration_rejects_unknown_facts():
    with pytest.raises(ValueError, match=r"'x': expected has unknown key\(s\) \['smaples'\]; valid: samples, files"):
        register_dataset("x", summary="", expected={"smaples": 3})
    with pytest.raises(ValueError, match="'x': metric 'f1' is not one of accuracy, auroc, top5_accuracy"):
        register_dataset("x", summary="", metric="f1")
    assert "x" not in list_datasets()


@pytest.mark.parametrize("name,needle", [
    ("sepsys", "unknown dataset 'sepsys' (did you mean 'sepsis'?); valid datasets: cifar10, cifar100, sepsis, "
               "speech_commands, stl10, svhn, synthetic, uea/<member>"),
    ("uea/No pe", "unknown uea dataset 'No pe' in 'uea/No pe'; valid: ACSF1, ArrowHead"),
    ("synthetic/x", "dataset 'synthetic' takes no '/<member>' suffix"),
])
def test_unknown_names_list_the_valid_ones(name, needle):
    for lookup in (split_name, dataset_info, dataset_status, preflight_problems, check_dataset):
        with pytest.raises(UnknownNameError) as error:
            lookup(name)
        assert needle in str(error.value)


def test_unreadable_cache_entry_is_rebuilt(tmp_path):
    path = cache_path(tmp_path, "demo", {"a": 1})
    assert path != cache_path(tmp_path, "demo", {"a": 2}) and path.parent.name == ".ndebench_cache"
    path.parent.mkdir()
    path.write_bytes(b"half-written")
    data, hit = cached(path, lambda: {"x": torch.arange(3)})
    assert not hit and torch.equal(data["x"], torch.arange(3))
    again, hit = cached(path, lambda: pytest.fail("rebuilt although cached"))
    assert hit and torch.equal(again["x"], torch.arange(3))


def test_unwritable_cache_only_warns(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.warns(UserWarning, match="could not write the preprocessing cache"):
        data, hit = cached(blocker / "sub" / "x.pt", lambda: {"x": torch.ones(1)})
    assert not hit and torch.equal(data["x"], torch.ones(1))


# The pre-Ray preflight (issue 14): a corrupt file stops the sweep before Ray starts, naming the file.

TS = "@problemName Car\n@univariate true\n@classLabel true 1 2\n@data\n"


@pytest.mark.parametrize("test_text,needle", [
    ("\x00\xff garbage", "no @data section with samples"),
    (TS + "1.0,2.0:3.0,4.0:1\n", "2 channels, but Car_TRAIN.ts has 1"),
    (TS + "1.0:1\n1.0:2.0:2\n", "line 6 has 2 channel(s), the first sample has 1"),
    (TS, "no @data section"),
])
def test_preflight_names_a_corrupt_ts_file(tmp_path, test_text, needle):
    folder = tmp_path / "Car"
    folder.mkdir()
    (folder / "Car_TRAIN.ts").write_text(TS + "1.0,2.0:1\n3.0,4.0:2\n")
    (folder / "Car_TEST.ts").write_text(test_text)
    problems = preflight_problems("uea/Car", tmp_path)
    assert len(problems) == 1 and str(folder / "Car_TEST.ts") in problems[0] and needle in problems[0]


def test_preflight_passes_intact_and_shipped_files(tmp_path):
    folder = tmp_path / "Car"
    folder.mkdir()
    for split in ("TRAIN", "TEST"):
        (folder / f"Car_{split}.ts").write_text("% comment\n" + TS + "1.0,2.0:1\n3.0,4.0:2\n")
    assert preflight_problems("uea/Car", tmp_path) == []
    assert preflight_problems("uea/BasicMotions", tmp_path) == [] and preflight_problems("synthetic") == []


def test_preflight_names_a_sepsis_record_with_a_bad_header(tmp_path):
    from ndebench.datasets import sepsis

    header = "|".join([f"f{i}" for i in range(sepsis.NUM_COLUMNS - 2)] + ["ICULOS", "SepsisLabel"])
    for folder, text in (("training_setA", header + "\n"), ("training_setB", "HR|O2Sat\n1|2\n")):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "p000001.psv").write_text(text)
    problems = preflight_problems("sepsis", tmp_path)
    assert problems == [f"cannot read {tmp_path / 'training_setB' / 'p000001.psv'}: ValueError: header has 2 "
                        f"columns, expected {sepsis.NUM_COLUMNS} ending in ICULOS|SepsisLabel"]


def test_preflight_names_a_speech_clip_that_is_not_16khz_mono(tmp_path):
    import wave

    from ndebench.datasets import speech_commands

    root = tmp_path / speech_commands.FOLDER
    for label in speech_commands.CLASSES:
        (root / label).mkdir(parents=True)
        with wave.open(str(root / label / "a.wav"), "wb") as clip:
            clip.setnchannels(1)
            clip.setsampwidth(2)
            clip.setframerate(8000 if label == "stop" else 16000)
            clip.writeframes(b"\x00\x00" * 10)
    (root / "yes" / "b.wav").write_bytes(b"RIFF")
    problems = preflight_problems("speech_commands", tmp_path)
    assert len(problems) == 1 and str(root / "yes" / "b.wav") in problems[0]
    (root / "yes" / "b.wav").unlink()
    assert preflight_problems("speech_commands", tmp_path) == [
        f"{root / 'stop' / 'a.wav'}: expected mono 16000 Hz audio, got 1 channel(s) at 8000 Hz"]


def test_sweep_stops_before_ray_naming_the_corrupt_file(tmp_path, monkeypatch, capsys):
    import yaml
    from ndebench.platform.cli.main import main

    monkeypatch.chdir(tmp_path)
    (tmp_path / "Car").mkdir()
    (tmp_path / "Car" / "Car_TRAIN.ts").write_text(TS + "1.0,2.0:1\n")
    (tmp_path / "Car" / "Car_TEST.ts").write_bytes(b"\x89PNG\x00\xff")
    config = tmp_path / "car.yaml"
    config.write_text(yaml.safe_dump({"study": "car", "models": ["neural_cde"], "datasets": ["uea/Car"],
                                      "regularizers": ["none"], "data_dir": str(tmp_path)}))
    assert main(["run", str(config)]) == 2
    captured = capsys.readouterr()
    assert f"cannot read {tmp_path / 'Car' / 'Car_TEST.ts'}" in captured.err and "Ray cluster" not in captured.out
    assert not (tmp_path / "mlflow.db").exists()


CAR_TRAIN = TS + "1.0,2.0,3.0:1\n3.0,4.0,5.0:2\n"


@pytest.mark.parametrize("name,files,needle", [
    ("value", {"Car_TEST.ts": TS + "1.0,abc,3.0:1\n"}, "Car_TEST.ts: ValueError: line 5: value 'abc' of channel 1 is "
                                                      "no number"),
    ("nan inside", {"Car_TEST.ts": TS + "1.0,2.0,3.0:1\n1.0,NaN,3.0:2\n"}, "Car_TEST.ts: ValueError: line 6: channel "
                                                                          "1: a missing value (NaN) inside a series"),
    ("label", {"Car_TEST.ts": TS + "1.0,2.0,3.0:1\n1.0,2.0,3.0:c\n"}, "line 6: label 'c' is not among the header's "
                                                                     "@classLabel values 1 2"),
    ("one class", {"Car_TRAIN.ts": TS + "1.0,2.0,3.0:1\n3.0,4.0,5.0:1\n"}, "Car_TRAIN.ts: ValueError: every sample "
                                                                          "has label '1'"),
    ("unseen", {"Car_TRAIN.ts": "@problemName Car\n@classLabel true 1 2 3\n@data\n1.0:1\n2.0:2\n",
                "Car_TEST.ts": "@problemName Car\n@classLabel true 1 2 3\n@data\n1.0:1\n2.0:3\n"},
     "Car_TEST.ts: ValueError: line 5: label '3' has no training sample in Car_TRAIN.ts"),
    ("inf", {"Car_TEST.ts": TS + "1.0,inf,3.0:1\n"}, "line 5: channel 1: an infinite value"),
    ("tsv latin", {"Car_TRAIN.tsv": "1\t1.0\t2.0\n2\t1.0\t\xe9\n", "Car_TEST.tsv": "1\t1.0\t2.0\n"},
     "Car_TRAIN.tsv: ValueError: line 2: not UTF-8 text"),
    ("tsv nan inside", {"Car_TRAIN.tsv": "1\t1.0\t2.0\t3.0\n2\t1.0\tNaN\t3.0\n", "Car_TEST.tsv": "1\t1.0\t2.0\n"},
     "Car_TRAIN.tsv: ValueError: line 2: a missing value (NaN) inside a series"),
])
def test_preflight_refuses_bad_data_naming_file_and_line(tmp_path, name, files, needle):
    """Review (g): each of these ran to exit 0 as "ok", or failed a cell after Ray started."""
    folder = tmp_path / "Car"
    folder.mkdir()
    suffix = ".tsv" if name.startswith("tsv") else ".ts"
    base = {f"Car_TRAIN{suffix}": CAR_TRAIN if suffix == ".ts" else "1\t1.0\t2.0\n2\t3.0\t4.0\n",
            f"Car_TEST{suffix}": CAR_TRAIN if suffix == ".ts" else "1\t1.0\t2.0\n"}
    for file, text in (base | files).items():
        (folder / file).write_text(text, encoding="latin-1")
    problems = preflight_problems("uea/Car", tmp_path)
    assert len(problems) == 1 and needle in problems[0], problems


def test_preflight_keeps_what_the_archive_writes(tmp_path):
    """Padding that ends a shorter ``.tsv`` series, ``?`` where a ``.ts`` header says ``@missing true``, unequal
    lengths in a ``.ts`` file: no problem."""
    folder = tmp_path / "Car"
    folder.mkdir()
    (folder / "Car_TRAIN.tsv").write_text("1\t1.0\t2.0\tNaN\n2\t3.0\t4.0\t5.0\n")
    (folder / "Car_TEST.tsv").write_text("2\t1.0\tNaN\tNaN\n")
    assert preflight_problems("uea/Car", tmp_path) == []
    for path in folder.iterdir():
        path.unlink()
    header = "@problemName Car\n@missing true\n@classLabel true 1 2\n@data\n"
    (folder / "Car_TRAIN.ts").write_text(header + "1.0,?,3.0:1\n3.0,4.0:2\n")
    (folder / "Car_TEST.ts").write_text(header + "1.0,2.0,3.0,4.0:2\n")
    assert preflight_problems("uea/Car", tmp_path) == []
