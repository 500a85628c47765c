"""Speech Commands v0.02, the ten-word subset of the reference pipeline, as 161 x 20 MFCC sequences."""
from __future__ import annotations

import os
import warnings
import wave
from pathlib import Path

import numpy as np
import torch
from ndebench.datasets.bundle import DatasetBundle
from ndebench.datasets.cache import cache_path, cached, fingerprint
from ndebench.datasets.files import CorruptFileError, corrupt_file, missing_files, resolve_data_dir
from ndebench.datasets.protocol import build_bundle, stratified_split
from ndebench.datasets.registry import register_dataset
from scipy.io import wavfile

FOLDER = "speech_commands_v0.02"
CLASSES = ("yes", "no", "up", "down", "left", "right", "on", "off", "stop", "go")
SAMPLE_RATE = 16000
N_MFCC, N_FFT, HOP = 20, 200, 100
LOG_OFFSET = 1e-6
ORIGIN = "Speech Commands v0.02 (download.tensorflow.org/data/speech_commands_v0.02.tar.gz, extracted into that folder)"
CHUNK = 2048


def clip_files(data_dir: str | os.PathLike | None = None) -> tuple[Path, list[tuple[Path, int]]]:
    """``(root, [(wav, class index), ...])`` for the ten classes, files sorted by name within a class.

    Raises :class:`MissingDataError` naming every class folder that is absent or holds no ``.wav``.
    """
    root = resolve_data_dir(data_dir) / FOLDER
    clips, absent = [], []
    for index, label in enumerate(CLASSES):
        files = sorted((root / label).glob("*.wav")) if (root / label).is_dir() else []
        if not files:
            absent.append(f"{FOLDER}/{label}/*.wav")
        clips += [(f, index) for f in files]
    if absent:
        raise missing_files("speech_commands", root.parent, absent, ORIGIN)
    return root, clips


def probe(member: str | None = None, data_dir: str | os.PathLike | None = None) -> None:
    """The preflight check: every clip's WAV header says mono at 16 kHz."""
    for path, _ in clip_files(data_dir)[1]:
        try:
            with wave.open(str(path)) as clip:
                layout = clip.getnchannels(), clip.getframerate()
        except (OSError, EOFError, wave.Error) as error:
            raise corrupt_file(path, error) from error
        if layout != (1, SAMPLE_RATE):
            raise CorruptFileError(f"{path}: expected mono {SAMPLE_RATE} Hz audio, got {layout[0]} channel(s) at "
                                   f"{layout[1]} Hz")


def read_clip(path: Path) -> np.ndarray:
    """Mono 16 kHz clip as float32 in ``[-1, 1]`` (16-bit PCM divided by ``2^15``, as Kidger's pipeline)."""
    try:
        rate, audio = wavfile.read(path)
    except Exception as error:
        raise corrupt_file(path, error) from error
    if rate != SAMPLE_RATE or audio.ndim != 1:
        raise CorruptFileError(f"{path}: expected mono {SAMPLE_RATE} Hz audio, got {rate} Hz with shape {audio.shape}")
    if audio.dtype == np.int16:
        return audio.astype(np.float32) / 2**15
    return audio.astype(np.float32)


def mfcc(audio: np.ndarray, n_mels: int = 64) -> np.ndarray:
    """MFCCs of ``audio`` ``(N, 16000)`` -> ``(N, 161, 20)``, equal to ``torchaudio.transforms.MFCC(
    sample_rate=16000, n_mfcc=20, log_mels=True, melkwargs=dict(n_fft=200, hop_length=100, n_mels=n_mels))``.

    Power spectrogram (periodic Hann window, centred frames with reflect padding), HTK mel filterbank
    without area normalization, ``log(mel + 1e-6)``, orthonormal DCT-II keeping 20 coefficients.
    Computed with librosa (the optional ``audio`` extra).
    """
    try:
        import librosa
    except ImportError:
        raise ImportError(
            "speech_commands needs librosa for the MFCCs: pip install 'ndebench[audio]' (or pip install librosa)"
        ) from None
    with warnings.catch_warnings():
        # 200-point FFT bins are 80 Hz apart, so the lowest of 64 HTK mel filters are empty: the reference
        # (torchaudio) has the same empty filters and only warns.
        warnings.filterwarnings("ignore", message="Empty filters detected")
        mel = librosa.feature.melspectrogram(
            y=audio, sr=SAMPLE_RATE, n_fft=N_FFT, hop_length=HOP, n_mels=n_mels, htk=True, norm=None,
            center=True, pad_mode="reflect", power=2.0,
        )
    coefficients = librosa.feature.mfcc(S=np.log(mel + LOG_OFFSET), n_mfcc=N_MFCC, dct_type=2, norm="ortho")
    return np.ascontiguousarray(coefficients.transpose(0, 2, 1), dtype=np.float32)


def _features(clips: list[tuple[Path, int]], n_mels: int) -> dict[str, torch.Tensor]:
    """Read every clip, keep those of exactly 16000 samples, and compute their MFCCs chunk by chunk."""
    audio, targets = [], []
    for path, label in clips:
        clip = read_clip(path)
        if clip.shape[0] == SAMPLE_RATE:
            audio.append(clip)
            targets.append(label)
    if not audio:
        raise CorruptFileError(f"no clip of exactly {SAMPLE_RATE} samples among {len(clips)} files")
    features = [mfcc(np.stack(audio[i:i + CHUNK]), n_mels) for i in range(0, len(audio), CHUNK)]
    return {"features": torch.from_numpy(np.concatenate(features)), "targets": torch.tensor(targets, dtype=torch.long)}


@register_dataset("speech_commands", summary="Speech Commands v0.02, 10 words, 161 x 20 MFCC (local files)",
                  expected={"samples": 34975, "classes": 10, "channels": 20, "length": 161},
                  locate=lambda member, data_dir: f"local files ({clip_files(data_dir)[0]})", probe=probe,
                  display="Speech Commands")
def speech_commands(*, seed: int = 0, data_dir: str | os.PathLike | None = None, n_mels: int = 64) -> DatasetBundle:
    """The ten words ``yes no up down left right on off stop go`` (class indices in that order), clips of
    exactly 16000 samples only (34,975 in v0.02), as MFCC sequences ``(N, 161, 20)`` (:func:`mfcc`).

    Time grid ``0, 1, ..., 160`` (T = 160). Stratified 70/15/15 split with the fixed random states 0 and
    1 of the reference pipeline, so ``seed`` does not change the split. Per-channel z-score with train
    statistics. The MFCCs are cached in ``<data_dir>/.ndebench_cache`` keyed by ``n_mels`` and the files.
    """
    if int(n_mels) < 1:
        raise ValueError(f"n_mels must be a positive integer; got {n_mels!r}")
    root, clips = clip_files(data_dir)
    params = {
        "dataset": "speech_commands", "version": 1, "classes": CLASSES, "n_mels": int(n_mels), "n_mfcc": N_MFCC,
        "n_fft": N_FFT, "hop_length": HOP, "files": fingerprint(root, (path for path, _ in clips)),
    }
    path = cache_path(root.parent, "speech_commands", params)
    data, hit = cached(path, lambda: _features(clips, int(n_mels)))
    features, targets = data["features"], data["targets"]
    return build_bundle(
        "speech_commands", features, targets, times=torch.arange(features.shape[1], dtype=torch.float32),
        split=stratified_split(targets, 0, 1), source=f"local files ({root})", num_classes=len(CLASSES),
        extra={"classes": list(CLASSES), "n_mels": int(n_mels),
               "cache": {"path": str(path), "hit": hit}},
    )
