"""One trial, free of Ray and MLflow: seed, load data, train with early stopping, evaluate.

The sweep driver wraps :func:`run_trial` in a Ray Tune trainable and records it in MLflow; tests call it
directly.
"""
from __future__ import annotations

import copy
import dataclasses
import math
import random
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np
import torch
import torch.nn.functional as F

from ndebench.datasets.registry import create_dataset
from ndebench.models.base import NDEClassifier, index_batch
from ndebench.models.integrate import SolverConfig, TrialRNG
from ndebench.models.registry import create_model
from ndebench.platform.config import TrainingConfig
from ndebench.platform.metrics import calibration_bins, classification_metrics
from ndebench.regularizers.registry import create_regularizer

EVAL_SEED_OFFSET = 1_000_003


@dataclass(frozen=True)
class TrialSpec:
    """A fully resolved trial: one (model, dataset, regularizer, seed) with fixed hyperparameters."""

    model: str
    dataset: str
    regularizer: str
    seed: int = 0
    phase: str = "evaluate"
    model_params: dict[str, Any] = field(default_factory=dict)
    regularizer_params: dict[str, Any] = field(default_factory=dict)
    training: TrainingConfig = TrainingConfig()
    solver: SolverConfig | None = None
    dataset_options: dict[str, Any] = field(default_factory=dict)
    data_dir: str | None = None
    device: str = "cpu"

    @classmethod
    def from_flat(cls, config: dict[str, Any]) -> "TrialSpec":
        """Build from the flat ``section.key`` config of a sweep trial (see ``SweepSpec.base_config``)."""

        def section(prefix: str) -> dict[str, Any]:
            return {k[len(prefix) + 1:]: v for k, v in config.items() if k.startswith(prefix + ".")}

        solver = section("solver")
        return cls(
            model=config["model"], dataset=config["dataset"], regularizer=config["regularizer"],
            seed=int(config.get("seed", 0)), phase=config.get("phase", "evaluate"),
            model_params=section("model"), regularizer_params=section("regularizer"),
            training=TrainingConfig(**section("training")), solver=SolverConfig(**solver) if solver else None,
            dataset_options=section("dataset"), data_dir=config.get("data_dir"), device=config.get("device", "cpu"),
        )


@dataclass
class TrialResult:
    """Outcome of a trial. ``status``: ``ok``, ``diverged`` (non-finite loss) or ``error``."""

    status: str
    epochs: int
    best_epoch: int
    val: dict[str, float]
    test: dict[str, float]
    calibration: dict[str, Any] | None
    protocol: dict[str, Any]
    message: str = ""


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def auto_batch_size(n_train: int) -> int:
    """The reference pipeline's rule: the largest ``2^i``, ``i`` in 4..7, with ``2^i <= N/2`` (at least 16)."""
    size = 16
    for i in range(4, 8):
        if 2**i <= n_train / 2:
            size = 2**i
    return size


class _Feed:
    """Mini-batches of one split: prepared tensors for time series, a DataLoader for image datasets."""

    def __init__(self, model: NDEClassifier, bundle: Any, split: Any, device: torch.device):
        self.device = device
        if getattr(bundle, "input_kind", "timeseries") == "image":
            self.dataset, self.inputs, self.targets = split, None, None
        else:
            inputs = model.prepare(bundle.times, split.values, split.static)
            self.inputs = tuple(x.to(device) for x in inputs) if isinstance(inputs, tuple) else inputs.to(device)
            self.targets = split.targets.to(device)

    def __len__(self) -> int:
        return len(self.dataset) if self.inputs is None else int(self.targets.shape[0])

    def batches(self, batch_size: int, generator: torch.Generator | None) -> Iterator[tuple[Any, torch.Tensor]]:
        if self.inputs is None:
            loader = torch.utils.data.DataLoader(self.dataset, batch_size=batch_size, shuffle=generator is not None, generator=generator)
            for x, y in loader:
                yield x.to(self.device), y.to(self.device)
            return
        n = len(self)
        order = torch.randperm(n, generator=generator) if generator is not None else torch.arange(n)
        for start in range(0, n, batch_size):
            index = order[start:start + batch_size].to(self.device)
            yield index_batch(self.inputs, index), self.targets[index]


def _loss(logits: torch.Tensor, targets: torch.Tensor, pos_weight: float | None) -> torch.Tensor:
    if logits.shape[-1] == 1:
        weight = None if pos_weight is None else torch.tensor(pos_weight, device=logits.device)
        return F.binary_cross_entropy_with_logits(logits[:, 0], targets.float(), pos_weight=weight)
    return F.cross_entropy(logits, targets)


@torch.no_grad()
def evaluate(model: NDEClassifier, feed: _Feed, batch_size: int, seed: int, *, top5: bool = False) -> tuple[dict[str, float], dict[str, Any]]:
    """Metrics of ``model`` on a split with the regularizer's test protocol (MC passes if it stays on).

    The MC draws come from a generator reset to ``seed + EVAL_SEED_OFFSET`` so that every evaluation of the
    same weights gives the same numbers. Returns (metrics, calibration bins).
    """
    model.eval()
    rng = TrialRNG.from_seed(seed + EVAL_SEED_OFFSET)
    probs, predicted, targets = [], [], []
    for inputs, y in feed.batches(batch_size, None):
        pred = model.predict(inputs, rng)
        probs.append(pred.probs.cpu())
        predicted.append((pred.logits[:, 0] > 0).long().cpu() if pred.logits.shape[-1] == 1 else pred.logits.argmax(-1).cpu())
        targets.append(y.cpu())
    probs_all, predicted_all, targets_all = torch.cat(probs), torch.cat(predicted), torch.cat(targets)
    metrics = classification_metrics(probs_all, targets_all, predicted=predicted_all, top5=top5)
    return metrics, calibration_bins(probs_all, targets_all)


@dataclass
class BestState:
    """The best epoch so far by validation loss: its loss, number, weights and validation metrics."""

    val_loss: float
    epoch: int
    weights: dict[str, Any]
    val: dict[str, float]


def _generators(rng: TrialRNG) -> dict[str, torch.Generator]:
    return {f.name: getattr(rng, f.name) for f in dataclasses.fields(rng)}


def _rng_state(rng: TrialRNG, shuffle: torch.Generator) -> dict[str, Any]:
    state = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state(),
             "shuffle": shuffle.get_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    state.update({f"trial.{name}": g.get_state() for name, g in _generators(rng).items()})
    return state


def _load_rng_state(state: dict[str, Any], rng: TrialRNG, shuffle: torch.Generator) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    shuffle.set_state(state["shuffle"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
    for name, generator in _generators(rng).items():
        generator.set_state(state[f"trial.{name}"])


def run_trial(
    spec: TrialSpec,
    *,
    on_epoch: Callable[[dict[str, float]], None] | None = None,
    evaluate_test: bool = True,
    on_checkpoint: Callable[[int, Callable[[], dict[str, Any]]], None] | None = None,
    resume_state: dict[str, Any] | None = None,
) -> TrialResult:
    """Train and evaluate one trial.

    Seeds Python, NumPy and torch from ``spec.seed``; the regularizer and the Brownian noise get their own
    generators (:class:`TrialRNG`). Training: Adam (or SGD) with ``weight_decay = lr * weight_decay_factor``,
    StepLR (or reduce-on-plateau),
    gradient-norm clipping after ``backward``, early stopping on validation loss (after ``min_epochs``, once
    ``patience`` epochs pass without improvement) and the best weights restored. ``on_epoch`` receives
    ``train_loss``, ``val_loss``, ``val_<metric>`` and ``epoch_time_s`` per epoch. A non-finite training
    loss ends the trial with status ``diverged``. The test split is only touched when ``evaluate_test``.

    Checkpoints: after every epoch ``on_checkpoint(epoch, snapshot)`` may call ``snapshot()`` for the full
    training state (weights, optimizer, scheduler, :class:`BestState`, the early-stopping decision and every
    random state: Python, NumPy, torch, the shuffle generator and the :class:`TrialRNG` generators). A trial
    started with ``resume_state=snapshot()`` continues after that epoch and ends with exactly the metrics of
    an uninterrupted trial on the same device.
    """
    seed_everything(spec.seed)
    cfg = spec.training
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    device = torch.device(spec.device)
    options = dict(spec.dataset_options)
    bundle = create_dataset(spec.dataset, seed=spec.seed, data_dir=spec.data_dir, **options)
    regularizer = create_regularizer(spec.regularizer, **spec.regularizer_params)
    binary = bundle.task == "binary"
    kwargs: dict[str, Any] = dict(
        in_channels=bundle.channels, num_classes=bundle.num_classes, regularizer=regularizer, binary=binary,
        **spec.model_params,
    )
    if getattr(bundle, "input_kind", "timeseries") == "image":
        kwargs["image_size"] = bundle.image_size
    else:
        kwargs["times"] = bundle.times
        if bundle.train.static is not None:
            kwargs["static_channels"] = bundle.train.static.shape[1]
    if spec.solver is not None:
        kwargs["solver"] = spec.solver
    model = create_model(spec.model, **kwargs).to(device)
    feeds = {name: _Feed(model, bundle, getattr(bundle, name), device) for name in ("train", "val", "test")}
    batch_size = auto_batch_size(len(feeds["train"])) if cfg.batch_size == "auto" else int(cfg.batch_size)
    top5 = bundle.num_classes >= 100
    pos_weight = bundle.extra.get("pos_weight") if binary else None
    metric_name = "auroc" if binary else ("top5_accuracy" if top5 else "accuracy")

    decay = cfg.lr * cfg.weight_decay_factor
    if cfg.optimizer == "sgd":
        optimizer = torch.optim.SGD(model.parameters(), lr=cfg.lr, momentum=0.9, weight_decay=decay)
    else:
        optimizer = torch.optim.Adam(model.parameters(), lr=cfg.lr, weight_decay=decay)
    if cfg.scheduler == "plateau":
        scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, factor=cfg.lr_gamma, patience=cfg.lr_step)
    else:
        scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=cfg.lr_step, gamma=cfg.lr_gamma)
    rng = TrialRNG.from_seed(spec.seed)
    shuffle = torch.Generator().manual_seed(spec.seed)
    protocol = {**regularizer.describe(), "n_mc": model.n_mc()}
    best = BestState(math.inf, 0, copy.deepcopy(model.state_dict()), {})
    epoch, stop = 0, False
    if resume_state is not None:
        model.load_state_dict(resume_state["model"])
        optimizer.load_state_dict(resume_state["optimizer"])
        scheduler.load_state_dict(resume_state["scheduler"])
        best = BestState(**resume_state["best"])
        epoch, stop = resume_state["epoch"], resume_state["stop"]
        _load_rng_state(resume_state["rng"], rng, shuffle)

    def snapshot() -> dict[str, Any]:
        return {"epoch": epoch, "stop": stop, "model": model.state_dict(), "optimizer": optimizer.state_dict(),
                "scheduler": scheduler.state_dict(), "best": dataclasses.asdict(best),
                "rng": _rng_state(rng, shuffle)}

    while not stop and epoch < cfg.epochs:
        epoch += 1
        start = time.perf_counter()
        model.train()
        total, count = 0.0, 0
        for inputs, targets in feeds["train"].batches(batch_size, shuffle):
            optimizer.zero_grad(set_to_none=True)
            loss = _loss(model(inputs, rng), targets, pos_weight) + model.penalty().to(device)
            if not torch.isfinite(loss):
                return TrialResult("diverged", epoch, best.epoch, best.val, {}, None, protocol,
                                   f"non-finite training loss at epoch {epoch}")
            loss.backward()
            if cfg.grad_clip:
                torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
            optimizer.step()
            total += loss.item() * targets.shape[0]
            count += targets.shape[0]
        val, _ = evaluate(model, feeds["val"], batch_size, spec.seed, top5=top5)
        record = {"train_loss": total / count, "val_loss": val["nll"], f"val_{metric_name}": val[metric_name],
                  "epoch_time_s": time.perf_counter() - start}
        if on_epoch is not None:
            on_epoch(record)
        if not math.isfinite(val["nll"]):
            return TrialResult("diverged", epoch, best.epoch, best.val, {}, None, protocol,
                               f"non-finite validation loss at epoch {epoch}")
        if cfg.scheduler == "plateau":
            scheduler.step(val["nll"])
        else:
            scheduler.step()
        if val["nll"] < best.val_loss:
            best = BestState(val["nll"], epoch, copy.deepcopy(model.state_dict()), {f"val_{k}": v for k, v in val.items()})
        else:
            stop = epoch > cfg.min_epochs and epoch - best.epoch > cfg.patience
        if on_checkpoint is not None:
            on_checkpoint(epoch, snapshot)
    model.load_state_dict(best.weights)
    val_best = {**best.val, "val_loss": best.val_loss}
    test: dict[str, float] = {}
    calibration = None
    if evaluate_test:
        metrics, calibration = evaluate(model, feeds["test"], batch_size, spec.seed, top5=top5)
        test = {f"test_{k}": v for k, v in metrics.items()}
    return TrialResult("ok", epoch, best.epoch, val_best, test, calibration, protocol)



STATE_FILE = "trial_state.pt"


def save_trial_state(state: dict[str, Any], directory: str | Path) -> Path:
    """Write a :func:`run_trial` snapshot to ``directory/trial_state.pt``."""
    path = Path(directory) / STATE_FILE
    torch.save(state, path)
    return path


def load_trial_state(directory: str | Path) -> dict[str, Any]:
    """Read a snapshot written by :func:`save_trial_state`, onto the CPU."""
    # weights_only=False: the snapshot holds Python and NumPy random states, and it is our own file.
    return torch.load(Path(directory) / STATE_FILE, map_location="cpu", weights_only=False)
