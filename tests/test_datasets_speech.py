"""Speech Commands from a tiny fake v0.02 folder of real WAV files, through the real loader."""
from __future__ import annotations

import math
import sys

import numpy as np
import pytest
import torch
from fakes import write_clip
from ndebench.datasets import speech_commands
from ndebench.datasets.check import check_dataset, dataset_status
from ndebench.datasets.files import CorruptFileError, MissingDataError
from ndebench.datasets.protocol import NORM_EPS
from ndebench.datasets.registry import create_dataset, dataset_info
from ndebench.datasets.speech_commands import CLASSES, FOLDER

# A different clip count per class, so the class-index order is visible in the label counts.
COUNTS = {label: 6 + i for i, label in enumerate(CLASSES)}


@pytest.fixture
def speech_dir(tmp_path):
    rng = np.random.default_rng(0)
    root = tmp_path / FOLDER
    for i, label in enumerate(CLASSES):
        for j in range(COUNTS[label]):
            write_clip(root / label / f"speaker{j:02d}_nohash_0.wav", 16000, 200 + 150 * i, rng)
        write_clip(root / label / "short_nohash_0.wav", 15000, 200 + 150 * i, rng)  # dropped: not 16000 samples
    write_clip(root / "_background_noise_" / "noise.wav", 16000, 50, rng)  # not a class
    write_clip(root / "bed" / "speaker00_nohash_0.wav", 16000, 50, rng)  # not one of the ten words
    (root / "validation_list.txt").write_text("")
    return tmp_path


def torchaudio_mfcc(audio: torch.Tensor, n_mels: int) -> torch.Tensor:
    """torchaudio.transforms.MFCC(16000, n_mfcc=20, log_mels=True, melkwargs={n_fft: 200, hop_length: 100,
    n_mels}) written out from torchaudio's definitions (melscale_fbanks htk/no norm, create_dct ortho)."""
    spec = torch.stft(audio.double(), 200, hop_length=100, window=torch.hann_window(200, dtype=torch.float64),
                      center=True, pad_mode="reflect", return_complex=True).abs() ** 2
    freqs = torch.linspace(0, 8000, 101, dtype=torch.float64)

    def mel(f):
        return 2595.0 * math.log10(1.0 + f / 700.0)

    f_pts = 700.0 * (10 ** (torch.linspace(mel(0.0), mel(8000.0), n_mels + 2, dtype=torch.float64) / 2595.0) - 1.0)
    slopes = f_pts[None, :] - freqs[:, None]
    down, up = -slopes[:, :-2] / (f_pts[1:-1] - f_pts[:-2]), slopes[:, 2:] / (f_pts[2:] - f_pts[1:-1])
    fbank = torch.clamp(torch.minimum(down, up), min=0.0)
    log_mel = torch.log(torch.einsum("fm,nft->nmt", fbank, spec) + 1e-6)
    n, k = torch.arange(n_mels, dtype=torch.float64), torch.arange(20, dtype=torch.float64)[:, None]
    dct = torch.cos(math.pi / n_mels * (n + 0.5) * k) * math.sqrt(2.0 / n_mels)
    dct[0] /= math.sqrt(2.0)
    return torch.einsum("km,nmt->ntk", dct, log_mel)


@pytest.mark.parametrize("n_mels", [64, 128])
def test_mfcc_matches_torchaudio_definition(n_mels):
    audio = 0.2 * torch.randn(3, 16000, generator=torch.Generator().manual_seed(0))
    ours = torch.from_numpy(speech_commands.mfcc(audio.numpy(), n_mels))
    assert ours.shape == (3, 161, 20)
    assert torch.allclose(ours.double(), torchaudio_mfcc(audio, n_mels), atol=2e-3, rtol=1e-4)


def test_loads_fake_archive_with_reference_layout(speech_dir):
    bundle = create_dataset("speech_commands", seed=0, data_dir=speech_dir)
    n = sum(COUNTS.values())
    assert len(bundle.train) + len(bundle.val) + len(bundle.test) == n  # short clips, noise and 'bed' dropped
    assert bundle.train.values.shape[1:] == (161, 20) and bundle.channels == 20
    assert torch.equal(bundle.times, torch.arange(161, dtype=torch.float32)) and bundle.T == 160.0
    targets = torch.cat([bundle.train.targets, bundle.val.targets, bundle.test.targets])
    assert torch.bincount(targets).tolist() == [COUNTS[label] for label in CLASSES]
    assert bundle.extra["classes"] == list(CLASSES) and bundle.num_classes == 10
    assert bundle.task == "classification" and dataset_info("speech_commands").metric == "accuracy"


def test_split_is_fixed_stratified_and_disjoint(speech_dir):
    a = create_dataset("speech_commands", seed=0, data_dir=speech_dir)
    b = create_dataset("speech_commands", seed=4, data_dir=speech_dir)
    n = sum(COUNTS.values())
    indices = a.extra["indices"]
    assert sorted(torch.cat(list(indices.values())).tolist()) == list(range(n))
    assert len(indices["train"]) in (math.floor(0.7 * n), math.ceil(0.7 * n))
    for part in indices:
        assert torch.equal(indices[part], b.extra["indices"][part])
    for k, label in enumerate(CLASSES):
        in_train = int((a.train.targets == k).sum())
        assert math.floor(0.7 * COUNTS[label]) - 1 <= in_train <= math.ceil(0.7 * COUNTS[label]) + 1


def test_normalized_with_train_statistics(speech_dir):
    bundle = create_dataset("speech_commands", seed=0, data_dir=speech_dir)
    train = bundle.train.values.double().reshape(-1, 20)
    std = bundle.extra["std"].double()
    assert torch.allclose(train.mean(0), torch.zeros(20, dtype=torch.float64), atol=1e-5)
    assert torch.allclose(train.std(0), std / (std + NORM_EPS), atol=1e-5)
    raw = torch.load(bundle.extra["cache"]["path"], weights_only=True)["features"].double()
    expected = (raw[bundle.extra["indices"]["test"]] - bundle.extra["mean"].double()) / (std + NORM_EPS)
    assert torch.allclose(bundle.test.values.double(), expected, atol=1e-4)


def test_cache_is_written_then_reused_and_keyed_by_n_mels(speech_dir, monkeypatch):
    first = create_dataset("speech_commands", seed=0, data_dir=speech_dir)
    assert first.extra["cache"]["hit"] is False
    assert (speech_dir / ".ndebench_cache").is_dir()

    def no_reading(path):
        raise AssertionError(f"read {path} although the cache exists")

    monkeypatch.setattr(speech_commands, "read_clip", no_reading)
    second = create_dataset("speech_commands", seed=0, data_dir=speech_dir)
    assert second.extra["cache"]["hit"] is True
    assert torch.equal(first.train.values, second.train.values)
    monkeypatch.undo()
    other = create_dataset("speech_commands", seed=0, data_dir=speech_dir, n_mels=32)
    assert other.extra["cache"]["hit"] is False and other.extra["cache"]["path"] != first.extra["cache"]["path"]
    assert not torch.equal(other.train.values, first.train.values)


def test_missing_folders_are_named(tmp_path):
    with pytest.raises(MissingDataError) as info:
        create_dataset("speech_commands", seed=0, data_dir=tmp_path)
    for label in CLASSES:
        assert str(tmp_path / FOLDER / label / "*.wav") in str(info.value)


def test_partially_missing_classes_are_named(speech_dir):
    for wav in (speech_dir / FOLDER / "stop").glob("*.wav"):
        wav.unlink()
    with pytest.raises(MissingDataError, match="stop") as info:
        create_dataset("speech_commands", seed=0, data_dir=speech_dir)
    assert "/yes/" not in str(info.value)


def test_corrupt_wav_names_the_file(speech_dir):
    bad = speech_dir / FOLDER / "go" / "speaker00_nohash_0.wav"
    bad.write_bytes(bad.read_bytes()[:30])
    with pytest.raises(CorruptFileError, match=str(bad)):
        create_dataset("speech_commands", seed=0, data_dir=speech_dir)


def test_missing_librosa_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "librosa", None)
    with pytest.raises(ImportError, match=r"ndebench\[audio\]"):
        speech_commands.mfcc(np.zeros((1, 16000), dtype=np.float32))


def test_status_and_check(speech_dir, tmp_path_factory):
    status = dataset_status("speech_commands", speech_dir)
    assert status["available"] and str(speech_dir / FOLDER) in status["source"]
    assert status["shape"] == "34975 x 161 x 20, 10 classes"
    problems = check_dataset("speech_commands", speech_dir)
    assert problems == [f"{sum(COUNTS.values())} samples, the archive has 34975"]
    empty = tmp_path_factory.mktemp("empty")
    assert not dataset_status("speech_commands", empty)["available"]
    assert "Put them here" in check_dataset("speech_commands", empty)[0]
