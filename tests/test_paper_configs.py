"""Every paper config validates and its cells train for one epoch through run_trial on fake archives."""
from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest
from fakes import MAKERS, make_stays, write_clip, write_ts
from ndebench.datasets.speech_commands import CLASSES, FOLDER
from ndebench.datasets.uea import PAPER_SHAPES, shipped_sets
from ndebench.platform.spec.config import Space, load_spec
from ndebench.platform.trial import TrialSpec, run_trial

CONFIGS = sorted(Path(__file__).parent.parent.glob("tune_configs/paper_*.yaml"))
IMAGE_CONFIGS = ("paper_table3_image_regularizers", "paper_table6_image_ndes", "paper_table17_jump_rates_images",
                 "paper_fig6_9_image_sensitivity")


def first_value(value):
    """A search space's first choice or lower bound: a value the tuner can draw."""
    return value.args[0] if isinstance(value, Space) else value


def fake_uea(root: Path, name: str) -> None:
    _, classes, channels, length = PAPER_SHAPES[name]
    rng = np.random.default_rng(0)
    for split in ("TRAIN", "TEST"):
        labels = [f"c{k}" for k in range(classes)] * 4
        samples = [rng.normal(size=(channels, min(length or 10, 10))) for _ in labels]
        write_ts(root / name / f"{name}_{split}.ts", samples, labels)


def fake_sepsis(root: Path, every: bool) -> None:
    """The 60 fake stays, or 30 of them in the suite (Sepsis' natural splines cost a Python loop per series)."""
    make_stays(root, np.random.default_rng(0))
    if not every:
        for path in sorted(root.glob("training_set*/p*.psv")):
            if int(path.stem[1:]) % 2:
                path.unlink()


def fake_speech(root: Path) -> None:
    rng = np.random.default_rng(0)
    for i, label in enumerate(CLASSES):
        for j in range(8):
            write_clip(root / FOLDER / label / f"speaker{j:02d}_nohash_0.wav", 16000, 200 + 150 * i, rng)


# Natural cubic splines of NaN-laden Sepsis rows go through torchcde's per-series loop (tens of seconds on
# the fake archive): Speech, Sepsis and image configs run each model once in the suite (the OI config, with
# twice the channels, its first and last model). Once, by hand: every (model, regularizer) cell of both
# Sepsis configs on the 60 stays passed.
SLOW = ("paper_table4_speech_commands", "paper_table12_speech_sensitivity", "paper_table15_speech_timing",
        "paper_table18_ncde_jump_speech", "paper_table5_sepsis_no_oi", "paper_table5_sepsis_oi")
HEAVY = SLOW + IMAGE_CONFIGS
# Image trials at the paper's size (10.6M parameters, 100 Euler steps of a 1024-d state) take minutes on
# a shared CPU; the suite runs them with a narrow extractor and NDE (run_config(..., small_images=False)
# runs them at full size).
SMALL_IMAGE = {"model.width": 8, "model.hidden_size": 64}


def cells(spec, name: str, *, every: bool = False) -> list[tuple[str, str, str]]:
    """(model, dataset, regularizer) cells to run: every (model, regularizer) pair (for the heavy configs
    each model once, regularizers cycled, unless ``every``), datasets cycled, fake-archive sets first."""
    datasets = ([d for d in spec.datasets if not d.startswith("uea/") or d[4:] not in shipped_sets()]
                or list(spec.datasets))
    pairs = list(itertools.product(spec.models, spec.regularizers))
    if name in HEAVY and not every:
        regularizers = list(spec.regularizers)
        models = spec.models if name != "paper_table5_sepsis_oi" else (spec.models[0], spec.models[-1])
        pairs = [(model, regularizers[(i + 1) % len(regularizers)]) for i, model in enumerate(models)]
    return [(model, datasets[i % len(datasets)], reg) for i, (model, reg) in enumerate(pairs)]


def run_config(
    path: Path, root: Path, record_md5, *, every: bool = False, small_images: bool = True
) -> list[tuple[str, str, str]]:
    """One-epoch ``run_trial`` of the config's cells on fake archives under ``root``; returns
    ``(model, regularizer, test protocol)`` per cell."""
    spec = load_spec(path)
    tags = []
    for model, dataset, regularizer in cells(spec, path.stem, every=every):
        if dataset.startswith("uea/"):
            fake_uea(root, dataset[4:])
        elif dataset == "sepsis":
            fake_sepsis(root, every)
        elif dataset == "speech_commands":
            fake_speech(root)
        elif not (root / dataset).exists():
            MAKERS[dataset](root, np.random.default_rng(0))
            record_md5(root)
        flat = {key: first_value(value) for key, value in spec.base_config(model, dataset, regularizer).items()}
        flat.update({"data_dir": str(root), "training.epochs": 1, "training.threads": 1})
        if path.stem in IMAGE_CONFIGS and small_images:
            flat.update(SMALL_IMAGE)
        result = run_trial(TrialSpec.from_flat(flat))
        assert result.status == "ok", (model, dataset, regularizer, result.message)
        metric = "test_auroc" if dataset == "sepsis" else "test_accuracy"
        assert 0.0 <= result.test[metric] <= 1.0
        tags.append((model, regularizer, result.protocol["test_protocol"]))
    return tags


# The Speech and Sepsis configs train for tens of seconds each (SLOW): end-to-end runs, in the system lane.
@pytest.mark.parametrize("path", [pytest.param(p, marks=pytest.mark.system) if p.stem in SLOW else p
                                  for p in CONFIGS], ids=lambda p: p.stem)
def test_paper_config_runs_one_epoch_on_fake_archives(path, tmp_path, fake_md5):
    sde = {"neural_sde", "neural_lsde", "neural_lnsde", "neural_gsde",
           "image_nsde_additive", "image_nsde_multiplicative"}
    for model, regularizer, tag in run_config(path, tmp_path, fake_md5):
        if regularizer in ("continuum_dropout", "jump_diffusion_ttn"):
            assert tag == "mc5"
        else:
            assert tag == ("stochastic-1" if model in sde else "deterministic")
