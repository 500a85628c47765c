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
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from ndebench.datasets.registry import create_dataset, dataset_info
from ndebench.models.base import DataSpec, NDEClassifier, TimedInputs, index_batch, inputs_to
from ndebench.models.integrate import SolverConfig, TrialRNG, step_limit
from ndebench.models.registry import create_model
from ndebench.platform.deadline import Deadline, TrialTimeout
from ndebench.platform.metrics import calibration_bins, classification_metrics, uncertainty_metrics
from ndebench.platform.spec.config import TrainingConfig
from ndebench.regularizers.registry import create_regularizer


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
    select: str = "best_epoch"

    @classmethod
    def from_flat(cls, config: dict[str, Any]) -> TrialSpec:
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
            select=config.get("select", "best_epoch"),
        )


@dataclass
class TrialResult:
    """Outcome of a trial. ``status``: ``ok``, ``diverged`` (non-finite loss) or ``timeout``; ``best_epoch``: the
    epoch of ``val`` and ``weights`` (the last under ``select`` ``last_epoch``); ``protocol``: the test protocol
    (``test_protocol``, ``n_mc``, ``point_predictor``) and ``regularizer``, the regularizer's ``describe()``."""

    status: str
    epochs: int
    best_epoch: int
    val: dict[str, float]
    test: dict[str, float]
    calibration: dict[str, Any] | None
    protocol: dict[str, Any]
    message: str = ""
    weights: dict[str, Any] | None = None


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
    index where the split has one), a DataLoader for image datasets. ``deadline`` is checked before each batch."""

    def __init__(self, model: NDEClassifier, bundle: Any, split: Any, device: torch.device):
        self.device, self.deadline = device, Deadline(None)
        if bundle.input_kind == "image":
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
            loader = torch.utils.data.DataLoader(self.dataset, batch_size=batch_size, shuffle=training,
                                                 generator=generator)
            for x, y in loader:
                self.deadline.check()
                if not (training and len(y) == 1):
                    yield x.to(self.device), y.to(self.device)
            return
        n = len(self)
        order = torch.randperm(n, generator=generator) if training else torch.arange(n)
        for start in range(0, n, batch_size):
            self.deadline.check()
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
def evaluate(model: NDEClassifier, feed: _Feed, batch_size: int, seed: int, *,
             top5: bool = False, n_mc: int | None = None) -> tuple[dict[str, float], dict[str, Any]]:
    """Metrics of ``model`` on a split with the regularizer's test protocol: ``n_mc`` passes per prediction (default
    the model's :meth:`~ndebench.models.base.NDEClassifier.n_mc`).

    Headline metrics (accuracy, top-5, AUROC) come from the point predictor: Algorithm 1's
    ``head(mean_j z_j(T))`` (``Prediction.logits``), or the MC predictive distribution for a regularizer
    whose ``point_predictor`` is ``mc_probs`` (``jump_diffusion_ttn``, as Liu et al.). NLL, ECE and the
    reliability bins come from the MC predictive distribution (``Prediction.probs``); ``z_cov_trace`` and
    ``predictive_entropy`` are Section 3.3's uncertainty (:func:`uncertainty_metrics`). The MC draws come
    from :meth:`TrialRNG.for_evaluation` of ``seed``, so that every evaluation of the same weights
    gives the same numbers. Returns (metrics, calibration bins).
    """
    model.eval()
    rng = TrialRNG.for_evaluation(seed)
    from_probs = model.regularizer.point_predictor == "mc_probs"
    probs, scores, z_var, targets = [], [], [], []
    for inputs, y in feed.batches(batch_size, None):
        pred = model.predict(inputs, rng, n_mc)
        probs.append(pred.probs.cpu())
        scores.append((pred.probs if from_probs else pred.logits).cpu())
        z_var.append(pred.z_var.cpu())
        targets.append(y.cpu())
    probs_all, targets_all = torch.cat(probs), torch.cat(targets)
    metrics = classification_metrics(probs_all, targets_all, torch.cat(scores), top5=top5)
    metrics.update(uncertainty_metrics(probs_all, torch.cat(z_var)))
    return metrics, calibration_bins(probs_all, targets_all)


@dataclass
class BestState:
    """The best epoch so far by validation loss: its loss, number, weights and validation metrics."""

    val_loss: float
    epoch: int
    weights: dict[str, Any]
    val: dict[str, float]


def _rng_state(rng: TrialRNG) -> dict[str, Any]:
    # Plain data and tensors only, so that checkpoints load with torch.load(weights_only=True).
    name, keys, pos, has_gauss, gauss = np.random.get_state()
    state = {"python": random.getstate(), "numpy": [name, torch.from_numpy(keys.astype(np.int64)), int(pos),
                                                    int(has_gauss), float(gauss)],
             "torch": torch.get_rng_state(), "trial": rng.state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def _load_rng_state(state: dict[str, Any], rng: TrialRNG) -> None:
    random.setstate(state["python"])
    name, keys, pos, has_gauss, gauss = state["numpy"]
    np.random.set_state((name, keys.numpy().astype(np.uint32), pos, has_gauss, gauss))
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
    rng.load_state(state["trial"])


@dataclass
class BuiltTrial:
    """A trial's untrained model, its data feeds and what training needs (``num_classes`` K: chance ``ln K``)."""

    model: NDEClassifier
    feeds: dict[str, _Feed]
    batch_size: int
    pos_weight: float | None
    metric_name: str
    num_classes: int

    @property
    def top5(self) -> bool:
        """Whether evaluation computes top-5 accuracy: the dataset's primary metric is ``top5_accuracy``."""
        return self.metric_name == "top5_accuracy"


def data_spec(bundle: Any) -> DataSpec:
    """What the model is told of a dataset bundle (time-series or image), read from it in this one place."""
    if bundle.input_kind == "image":
        return DataSpec(bundle.channels, bundle.num_classes, bundle.task == "binary", image_size=bundle.image_size)
    static = bundle.train.static
    return DataSpec(bundle.channels, bundle.num_classes, bundle.task == "binary", times=bundle.times,
                    static_channels=0 if static is None else static.shape[1], count_channels=bundle.count_channels)


def build_trial(spec: TrialSpec) -> BuiltTrial:
    """Seed Python, NumPy and torch from ``spec.seed``, load the data and build the model of ``spec`` (untrained:
    :func:`run_trial` trains it, re-evaluation loads trained weights with ``load_state_dict``)."""
    seed_everything(spec.seed)
    if spec.training.threads:
        torch.set_num_threads(spec.training.threads)
    device = torch.device(spec.device)
    bundle = create_dataset(spec.dataset, seed=spec.seed, data_dir=spec.data_dir, **dict(spec.dataset_options))
    regularizer = create_regularizer(spec.regularizer, **spec.regularizer_params)
    binary = bundle.task == "binary"
    model = create_model(spec.model, data_spec(bundle), regularizer=regularizer, solver=spec.solver,
                         **spec.model_params).to(device)
    feeds = {name: _Feed(model, bundle, getattr(bundle, name), device) for name in ("train", "val", "test")}
    return BuiltTrial(model, feeds, resolve_batch_size(spec.training.batch_size, bundle),
                      bundle.extra.get("pos_weight") if binary else None, dataset_info(spec.dataset).metric,
                      bundle.num_classes)


class _Training:
    """The mutable state of a trial's training: optimizer, scheduler, generators, best epoch, epoch counter
    and the early-stopping decision; :meth:`snapshot` and :meth:`restore` cover all of it."""

    def __init__(self, built: BuiltTrial, cfg: TrainingConfig, seed: int):
        self.built, self.cfg, self.model = built, cfg, built.model
        decay = cfg.lr * cfg.weight_decay_factor
        if cfg.optimizer == "sgd":
            self.optimizer = torch.optim.SGD(self.model.parameters(), lr=cfg.lr, momentum=0.9, weight_decay=decay)
        else:
            self.optimizer = torch.optim.Adam(self.model.parameters(), lr=cfg.lr, weight_decay=decay)
        if cfg.scheduler == "plateau":
            self.scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(self.optimizer, factor=cfg.lr_gamma,
                                                                        patience=cfg.lr_step)
        else:
            self.scheduler = torch.optim.lr_scheduler.StepLR(self.optimizer, step_size=cfg.lr_step, gamma=cfg.lr_gamma)
        self.rng = TrialRNG.from_seed(seed)
        self.best = BestState(math.inf, 0, copy.deepcopy(self.model.state_dict()), {})
        self.last_val: dict[str, float] = {}  # the latest epoch's validation values, for select last_epoch
        self.epoch, self.stop = 0, False

    def snapshot(self) -> dict[str, Any]:
        return {"epoch": self.epoch, "stop": self.stop, "model": self.model.state_dict(),
                "optimizer": self.optimizer.state_dict(), "scheduler": self.scheduler.state_dict(),
                "best": dataclasses.asdict(self.best) | {"val": {k: float(v) for k, v in self.best.val.items()}},
                "last_val": {k: float(v) for k, v in self.last_val.items()}, "rng": _rng_state(self.rng)}

    def restore(self, state: dict[str, Any]) -> None:
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        self.best = BestState(**state["best"])
        self.last_val = dict(state.get("last_val", {}))
        self.epoch, self.stop = state["epoch"], state["stop"]
        _load_rng_state(state["rng"], self.rng)

    def selected(self, select: str) -> BestState:
        """The epoch a result carries: the best by validation loss, or (``last_epoch``) the one training ended with."""
        if select == "last_epoch" and self.last_val:
            return BestState(self.last_val["val_loss"], self.epoch, self.model.state_dict(), self.last_val)
        return self.best

    def train_epoch(self) -> float | None:
        """One pass over the training split; the mean loss, or ``None`` at the first non-finite batch loss."""
        model, built = self.model, self.built
        device = next(model.parameters()).device
        model.train()
        total, count = 0.0, 0
        for inputs, targets in built.feeds["train"].batches(built.batch_size, self.rng.shuffle):
            self.optimizer.zero_grad(set_to_none=True)
            loss = _loss(model(inputs, self.rng), targets, built.pos_weight) + model.penalty().to(device)
            if not torch.isfinite(loss):
                return None
            loss.backward()
            if self.cfg.grad_clip:
                torch.nn.utils.clip_grad_norm_(model.parameters(), self.cfg.grad_clip)
            self.optimizer.step()
            total += loss.item() * targets.shape[0]
            count += targets.shape[0]
        return total / count

    def end_epoch(self, val: dict[str, float]) -> None:
        """Step the scheduler, keep the best weights by validation NLL and decide on early stopping."""
        if self.cfg.scheduler == "plateau":
            self.scheduler.step(val["nll"])
        else:
            self.scheduler.step()
        self.last_val = {f"val_{k}": v for k, v in val.items()} | {"val_loss": val["nll"]}
        if val["nll"] < self.best.val_loss:
            self.best = BestState(val["nll"], self.epoch, copy.deepcopy(self.model.state_dict()),
                                  {f"val_{k}": v for k, v in val.items()})
        else:
            self.stop = self.epoch > self.cfg.min_epochs and self.epoch - self.best.epoch > self.cfg.patience


def run_trial(
    spec: TrialSpec,
    *,
    on_epoch: Callable[[dict[str, float]], None] | None = None,
    evaluate_test: bool = True,
    on_checkpoint: Callable[[int, Callable[[], dict[str, Any]]], None] | None = None,
    resume_state: dict[str, Any] | None = None,
    timeout_s: float | None = None,
) -> TrialResult:
    """Train and evaluate one trial.

    Seeds Python, NumPy and torch from ``spec.seed``; the regularizer and the Brownian noise get their own
    generators (:class:`TrialRNG`). Training: Adam (or SGD) with ``weight_decay = lr * weight_decay_factor``,
    StepLR (or reduce-on-plateau), gradient-norm clipping after ``backward``, early stopping on validation
    loss (after ``min_epochs``, once ``patience`` epochs pass without improvement) and the best weights
    restored (``spec.select`` ``last_epoch``: the last epoch's, as the reference's tuning trials). ``on_epoch``
    receives ``train_loss``, ``val_loss``, ``val_<metric>``, ``epoch_time_s`` and ``train_time_s`` (the training
    batches only, without the validation passes) per epoch. A non-finite training or validation loss ends the
    trial with status ``diverged``. The test split is only touched when ``evaluate_test``.

    Checkpoints: after every epoch ``on_checkpoint(epoch, snapshot)`` may call ``snapshot()`` for the full
    training state (weights, optimizer, scheduler, :class:`BestState`, the early-stopping decision and every
    random state: Python, NumPy, torch and the :class:`TrialRNG` generators). A trial
    started with ``resume_state=snapshot()`` continues after that epoch and ends with exactly the metrics of
    an uninterrupted trial on the same device.

    ``timeout_s`` (``tune.trial_timeout_s``): a trial still running ``timeout_s`` seconds after this call began
    (data loading included; a resumed trial counts from its restart) ends with status ``timeout`` before its
    next mini-batch of training, validation or test, keeping its last checkpoint. A single batch is never cut:
    ``solver.max_steps`` bounds an adaptive solve, and a solve that reaches it raises
    :class:`~ndebench.models.integrate.StepLimitError` (the adjoint's backward solves included).
    """
    deadline = Deadline(timeout_s)
    built = build_trial(spec)
    for feed in built.feeds.values():
        feed.deadline = deadline
    model = built.model
    training = _Training(built, spec.training, spec.seed)
    regularizer = model.regularizer
    protocol = {"regularizer": regularizer.describe(), "n_mc": model.n_mc(), "test_protocol": protocol_tag(model),
                "point_predictor": regularizer.point_predictor, "num_classes": built.num_classes}
    if resume_state is not None:
        training.restore(resume_state)

    def diverged(what: str) -> TrialResult:
        best = training.best
        return TrialResult("diverged", training.epoch, best.epoch, best.val, {}, None, protocol,
                           f"non-finite {what} loss at epoch {training.epoch}")

    try:
        while not training.stop and training.epoch < spec.training.epochs:
            training.epoch += 1
            start = time.perf_counter()
            train_loss = training.train_epoch()
            if train_loss is None:
                return diverged("training")
            train_time = time.perf_counter() - start
            val, _ = evaluate(model, built.feeds["val"], built.batch_size, spec.seed, top5=built.top5)
            if on_epoch is not None:
                on_epoch({"train_loss": train_loss, "val_loss": val["nll"],
                          f"val_{built.metric_name}": val[built.metric_name],
                          "epoch_time_s": time.perf_counter() - start, "train_time_s": train_time})
            if not math.isfinite(val["nll"]):
                return diverged("validation")
            training.end_epoch(val)
            if on_checkpoint is not None:
                on_checkpoint(training.epoch, training.snapshot)
        best = training.selected(spec.select)
        model.load_state_dict(best.weights)
        test: dict[str, float] = {}
        calibration = None
        if evaluate_test:
            metrics, calibration = evaluate(model, built.feeds["test"], built.batch_size, spec.seed, top5=built.top5)
            test = {f"test_{k}": v for k, v in metrics.items()}
    except TrialTimeout as exc:
        best = training.best
        return TrialResult("timeout", training.epoch, best.epoch, best.val, {}, None, protocol,
                           f"{exc}, in epoch {training.epoch}")
    except AssertionError as exc:
        limit = step_limit(exc, spec.solver, "adjoint backward")  # the forward solve raises it itself
        if limit is None:
            raise
        raise limit from exc
    return TrialResult("ok", training.epoch, best.epoch, {**best.val, "val_loss": best.val_loss}, test, calibration,
                       protocol | {"graph": model.graph_note(spec.device)}, weights=best.weights)


STATE_FILE = "trial_state.pt"


def save_trial_state(state: dict[str, Any], directory: str | Path) -> Path:
    """Write a :func:`run_trial` snapshot to ``directory/trial_state.pt``."""
    path = Path(directory) / STATE_FILE
    torch.save(state, path)
    return path


def load_trial_state(directory: str | Path) -> dict[str, Any]:
    """Read a snapshot written by :func:`save_trial_state`, onto the CPU. Only tensors and plain data are
    accepted (``weights_only=True``): a checkpoint can never run code."""
    return torch.load(Path(directory) / STATE_FILE, map_location="cpu", weights_only=True)
