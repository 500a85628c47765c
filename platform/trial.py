"""One trial, free of Ray and MLflow: seed, load data, train with early stopping, evaluate.

The sweep driver wraps :func:`run_trial` in a Ray Tune trainable and records it in MLflow; tests call it
directly.
"""
from __future__ import annotations

import copy
import math
import random
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

import numpy as np
import torch
import torch.nn.functional as F

from ndebench.datasets.registry import create_dataset
from ndebench.models.base import NDEClassifier, TimedInputs, index_batch, inputs_to
from ndebench.models.integrate import SolverConfig, TrialRNG
from ndebench.models.registry import create_model
from ndebench.platform.config import TrainingConfig
from ndebench.platform.metrics import calibration_bins, classification_metrics, uncertainty_metrics
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


def auto_batch_size(n_total: int) -> int:
    """The reference pipeline's rule: the largest ``2^i``, ``i`` in 4..7, with ``2^i <= N/2`` (at least 16).

    ``N`` is the size of the whole data set before the split (torch-ists' ``model_run.py`` takes
    ``X.shape[0]`` after concatenating the archive's train and test files), not the training split.
    """
    size = 16
    for i in range(4, 8):
        if 2**i <= n_total / 2:
            size = 2**i
    return size


def resolve_batch_size(setting: int | str, bundle: Any) -> int:
    """``training.batch_size``: an integer as is; ``auto``: the data set's own batch size from the paper
    (``extra["batch_size"]``, e.g. 64 for STL-10) where it has one, else :func:`auto_batch_size` of N."""
    if setting != "auto":
        return int(setting)
    return int(bundle.extra.get("batch_size") or auto_batch_size(bundle.num_samples))


class _Feed:
    """Mini-batches of one split: prepared tensors for time series (with each sample's final observation
    index where the split has one), a DataLoader for image datasets."""

    def __init__(self, model: NDEClassifier, bundle: Any, split: Any, device: torch.device):
        self.device = device
        if getattr(bundle, "input_kind", "timeseries") == "image":
            self.dataset, self.inputs, self.targets = split, None, None
        else:
            inputs = model.prepare(bundle.times, split.values, split.static)
            if split.final_index is not None:
                inputs = TimedInputs(inputs, split.final_index)
            self.inputs = inputs_to(inputs, device)
            self.targets = split.targets.to(device)

    def __len__(self) -> int:
        return len(self.dataset) if self.inputs is None else int(self.targets.shape[0])

    def batches(self, batch_size: int, generator: torch.Generator | None) -> Iterator[tuple[Any, torch.Tensor]]:
        """Mini-batches in shuffled order when ``generator`` is given (training), else in order. A shuffled
        pass skips a last batch of one sample: the head's BatchNorm cannot train on it."""
        training = generator is not None
        if self.inputs is None:
            loader = torch.utils.data.DataLoader(self.dataset, batch_size=batch_size, shuffle=training, generator=generator)
            for x, y in loader:
                if not (training and len(y) == 1):
                    yield x.to(self.device), y.to(self.device)
            return
        n = len(self)
        order = torch.randperm(n, generator=generator) if training else torch.arange(n)
        for start in range(0, n, batch_size):
            index = order[start:start + batch_size].to(self.device)
            if not (training and len(index) == 1):
                yield index_batch(self.inputs, index), self.targets[index]


def _loss(logits: torch.Tensor, targets: torch.Tensor, pos_weight: float | None) -> torch.Tensor:
    if logits.shape[-1] == 1:
        weight = None if pos_weight is None else torch.tensor(pos_weight, device=logits.device)
        return F.binary_cross_entropy_with_logits(logits[:, 0], targets.float(), pos_weight=weight)
    return F.cross_entropy(logits, targets)


def protocol_tag(model: NDEClassifier) -> str:
    """How the test predictions are made, for the ``ndebench.test_protocol`` tag.

    ``deterministic``: one pass and nothing random in it; ``stochastic-1``: one random pass (an SDE model's
    Brownian noise, or a regularizer kept on at test with ``n_mc = 1``), as Oh et al.'s pipeline evaluates
    SDEs; ``mc<N>``: N random passes averaged (Algorithm 1, or the regularizer's ``point_predictor``).
    """
    random = model.stochastic_latent or (model.regularizer.stochastic and model.regularizer.test_time == "mc")
    if not random:
        return "deterministic"
    return f"mc{model.n_mc()}" if model.n_mc() > 1 else "stochastic-1"


@torch.no_grad()
def evaluate(model: NDEClassifier, feed: _Feed, batch_size: int, seed: int, *, top5: bool = False) -> tuple[dict[str, float], dict[str, Any]]:
    """Metrics of ``model`` on a split with the regularizer's test protocol (MC passes if it stays on).

    Headline metrics (accuracy, top-5, AUROC) come from the point predictor: Algorithm 1's
    ``head(mean_j z_j(T))`` (``Prediction.logits``), or the MC predictive distribution for a regularizer
    whose ``point_predictor`` is ``mc_probs`` (``jump_diffusion_ttn``, as Liu et al.). NLL, ECE and the
    reliability bins come from the MC predictive distribution (``Prediction.probs``); ``z_cov_trace`` and
    ``predictive_entropy`` are Section 3.3's uncertainty (:func:`uncertainty_metrics`). The MC draws come
    from a generator reset to ``seed + EVAL_SEED_OFFSET`` so that every evaluation of the same weights
    gives the same numbers. Returns (metrics, calibration bins).
    """
    model.eval()
    rng = TrialRNG.from_seed(seed + EVAL_SEED_OFFSET)
    from_probs = model.regularizer.point_predictor == "mc_probs"
    probs, scores, z_var, targets = [], [], [], []
    for inputs, y in feed.batches(batch_size, None):
        pred = model.predict(inputs, rng)
        probs.append(pred.probs.cpu())
        scores.append((pred.probs if from_probs else pred.logits).cpu())
        z_var.append(pred.z_var.cpu())
        targets.append(y.cpu())
    probs_all, targets_all = torch.cat(probs), torch.cat(targets)
    metrics = classification_metrics(probs_all, targets_all, torch.cat(scores), top5=top5)
    metrics.update(uncertainty_metrics(probs_all, torch.cat(z_var)))
    return metrics, calibration_bins(probs_all, targets_all)


def run_trial(
    spec: TrialSpec,
    *,
    on_epoch: Callable[[dict[str, float]], None] | None = None,
    evaluate_test: bool = True,
) -> TrialResult:
    """Train and evaluate one trial.

    Seeds Python, NumPy and torch from ``spec.seed``; the regularizer and the Brownian noise get their own
    generators (:class:`TrialRNG`). Training: Adam (or SGD) with ``weight_decay = lr * weight_decay_factor``,
    StepLR (or reduce-on-plateau),
    gradient-norm clipping after ``backward``, early stopping on validation loss (after ``min_epochs``, once
    ``patience`` epochs pass without improvement) and the best weights restored. ``on_epoch`` receives
    ``train_loss``, ``val_loss``, ``val_<metric>``, ``epoch_time_s`` and ``train_time_s`` (the training
    batches only, without the validation passes) per epoch. A non-finite training
    loss ends the trial with status ``diverged``. The test split is only touched when ``evaluate_test``.
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
    batch_size = resolve_batch_size(cfg.batch_size, bundle)
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
    protocol = {**regularizer.describe(), "n_mc": model.n_mc(), "test_protocol": protocol_tag(model),
                "point_predictor": regularizer.point_predictor}
    best = (math.inf, 0, copy.deepcopy(model.state_dict()), {})
    epoch = 0
    for epoch in range(1, cfg.epochs + 1):
        start = time.perf_counter()
        model.train()
        total, count = 0.0, 0
        for inputs, targets in feeds["train"].batches(batch_size, shuffle):
            optimizer.zero_grad(set_to_none=True)
            loss = _loss(model(inputs, rng), targets, pos_weight) + model.penalty().to(device)
            if not torch.isfinite(loss):
                return TrialResult("diverged", epoch, best[1], best[3], {}, None, protocol,
                                   f"non-finite training loss at epoch {epoch}")
            loss.backward()
            if cfg.grad_clip:
                torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
            optimizer.step()
            total += loss.item() * targets.shape[0]
            count += targets.shape[0]
        train_time = time.perf_counter() - start
        val, _ = evaluate(model, feeds["val"], batch_size, spec.seed, top5=top5)
        record = {"train_loss": total / count, "val_loss": val["nll"], f"val_{metric_name}": val[metric_name],
                  "epoch_time_s": time.perf_counter() - start, "train_time_s": train_time}
        if on_epoch is not None:
            on_epoch(record)
        if not math.isfinite(val["nll"]):
            return TrialResult("diverged", epoch, best[1], best[3], {}, None, protocol,
                               f"non-finite validation loss at epoch {epoch}")
        if cfg.scheduler == "plateau":
            scheduler.step(val["nll"])
        else:
            scheduler.step()
        if val["nll"] < best[0]:
            best = (val["nll"], epoch, copy.deepcopy(model.state_dict()), {f"val_{k}": v for k, v in val.items()})
        elif epoch > cfg.min_epochs and epoch - best[1] > cfg.patience:
            break
    model.load_state_dict(best[2])
    val_best = {**best[3], "val_loss": best[0]}
    test: dict[str, float] = {}
    calibration = None
    if evaluate_test:
        metrics, calibration = evaluate(model, feeds["test"], batch_size, spec.seed, top5=top5)
        test = {f"test_{k}": v for k, v in metrics.items()}
    return TrialResult("ok", epoch, best[1], val_best, test, calibration, protocol)



@dataclass
class BuiltTrial:
    """A trial's untrained model and its data feeds, as :func:`run_trial` builds them (for re-evaluation)."""

    model: NDEClassifier
    feeds: dict[str, _Feed]
    batch_size: int
    top5: bool


def build_trial(spec: TrialSpec) -> BuiltTrial:
    """Seed, load the data and build the model of ``spec`` exactly as :func:`run_trial` does, without training
    (the model then takes trained weights with ``load_state_dict``)."""
    seed_everything(spec.seed)
    device = torch.device(spec.device)
    bundle = create_dataset(spec.dataset, seed=spec.seed, data_dir=spec.data_dir, **dict(spec.dataset_options))
    regularizer = create_regularizer(spec.regularizer, **spec.regularizer_params)
    kwargs: dict[str, Any] = dict(in_channels=bundle.channels, num_classes=bundle.num_classes, regularizer=regularizer,
                                  binary=bundle.task == "binary", **spec.model_params)
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
    cfg = spec.training
    batch_size = auto_batch_size(len(feeds["train"])) if cfg.batch_size == "auto" else int(cfg.batch_size)
    return BuiltTrial(model, feeds, batch_size, bundle.num_classes >= 100)
