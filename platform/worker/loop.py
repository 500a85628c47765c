"""One trial, free of Ray and MLflow: seed, load data, train with early stopping, evaluate.

The sweep driver wraps :func:`run_trial` in a Ray Tune trainable and records it in MLflow; tests call it
directly.
"""
from __future__ import annotations

import copy
import dataclasses
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from ndebench.models.integrate import TrialRNG, step_limit
from ndebench.platform.common.metrics import decisive
from ndebench.platform.failures.deadline import Deadline, TrialTimeout
from ndebench.platform.spec.config import TrainingConfig
from ndebench.platform.worker.build import BuiltTrial, build_trial
from ndebench.platform.worker.evaluation import evaluate, protocol_tag, trial_loss
from ndebench.platform.worker.spec import TrialResult, TrialSpec
from ndebench.platform.worker.state import load_rng_state, rng_state


@dataclass
class BestState:
    """The best epoch so far by validation loss: its loss, number, weights and validation metrics."""

    val_loss: float
    epoch: int
    weights: dict[str, Any]
    val: dict[str, float]



class Training:
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
        regularizer = self.model.regularizer
        self.protocol = {"regularizer": regularizer.describe(), "n_mc": self.model.n_mc(),
                         "test_protocol": protocol_tag(self.model), "point_predictor": regularizer.point_predictor,
                         "num_classes": built.num_classes}

    def snapshot(self) -> dict[str, Any]:
        return {"epoch": self.epoch, "stop": self.stop, "model": self.model.state_dict(),
                "optimizer": self.optimizer.state_dict(), "scheduler": self.scheduler.state_dict(),
                "best": dataclasses.asdict(self.best) | {"val": {k: float(v) for k, v in self.best.val.items()}},
                "last_val": {k: float(v) for k, v in self.last_val.items()}, "rng": rng_state(self.rng)}

    def restore(self, state: dict[str, Any]) -> None:
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        self.best = BestState(**state["best"])
        self.last_val = dict(state.get("last_val", {}))
        self.epoch, self.stop = state["epoch"], state["stop"]
        load_rng_state(state["rng"], self.rng)

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
            loss = trial_loss(model(inputs, self.rng), targets, built.pos_weight) + model.penalty().to(device)
            if not torch.isfinite(loss):
                return None
            loss.backward()
            if self.cfg.grad_clip:
                torch.nn.utils.clip_grad_norm_(model.parameters(), self.cfg.grad_clip)
            self.optimizer.step()
            total += loss.item() * targets.shape[0]
            count += targets.shape[0]
        return total / count

    def validate(self, seed: int) -> dict[str, float]:
        """This epoch's metrics on the validation split (the MC draws seeded by ``seed``)."""
        built = self.built
        return evaluate(self.model, built.feeds["val"], built.batch_size, seed, top5=built.top5)[0]

    def epoch_record(self, train_loss: float, val: dict[str, float], start: float, train_time: float
                     ) -> dict[str, float]:
        """What ``on_epoch`` receives for an epoch that began at ``start`` (``time.perf_counter``)."""
        return {"train_loss": train_loss, "val_loss": val["nll"],
                f"val_{self.built.metric_name}": val[self.built.metric_name],
                "epoch_time_s": time.perf_counter() - start, "train_time_s": train_time}

    def ended(self, status: str, message: str) -> TrialResult:
        """The result of a trial cut short (``diverged``, ``timeout``): its best epoch so far, no test."""
        best = self.best
        return TrialResult(status, self.epoch, best.epoch, best.val, {}, None, self.protocol, message)

    def load_selected(self, spec: TrialSpec) -> BestState:
        """Load the weights of the epoch the result carries (:meth:`selected`) into the model."""
        best = self.selected(spec.select)
        self.model.load_state_dict(best.weights)
        return best

    def finish(self, spec: TrialSpec, evaluate_test: bool,
               tested: tuple[dict[str, float], dict[str, Any]] | None = None) -> TrialResult:
        """The ``ok`` result: the selected epoch's weights loaded, the test split evaluated when asked (``tested``:
        its metrics and calibration already computed with those weights)."""
        best = self.load_selected(spec)
        test: dict[str, float] = {}
        calibration = None
        if evaluate_test:
            built = self.built
            metrics, calibration = tested or evaluate(self.model, built.feeds["test"], built.batch_size, spec.seed,
                                                      top5=built.top5)
            test = {f"test_{k}": v for k, v in metrics.items()}
        return TrialResult("ok", self.epoch, best.epoch, {**best.val, "val_loss": best.val_loss}, test, calibration,
                           self.protocol | {"graph": self.model.graph_note(spec.device)}, weights=best.weights)

    def end_epoch(self, val: dict[str, float]) -> None:
        """Step the scheduler, keep the best weights by validation NLL and decide on early stopping, each reading the
        NLL at :data:`~ndebench.platform.common.metrics.DECISION_DIGITS` significant digits (an improvement must show
        there)."""
        loss = decisive(val["nll"])
        if self.cfg.scheduler == "plateau":
            self.scheduler.step(loss)
        else:
            self.scheduler.step()
        self.last_val = {f"val_{k}": v for k, v in val.items()} | {"val_loss": val["nll"]}
        if loss < decisive(self.best.val_loss):
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
    training = Training(built, spec.training, spec.seed)
    if resume_state is not None:
        training.restore(resume_state)
    try:
        while not training.stop and training.epoch < spec.training.epochs:
            training.epoch += 1
            start = time.perf_counter()
            train_loss = training.train_epoch()
            if train_loss is None:
                return training.ended("diverged", f"non-finite training loss at epoch {training.epoch}")
            train_time = time.perf_counter() - start
            val = training.validate(spec.seed)
            if on_epoch is not None:
                on_epoch(training.epoch_record(train_loss, val, start, train_time))
            if not math.isfinite(val["nll"]):
                return training.ended("diverged", f"non-finite validation loss at epoch {training.epoch}")
            training.end_epoch(val)
            if on_checkpoint is not None:
                on_checkpoint(training.epoch, training.snapshot)
        return training.finish(spec, evaluate_test)
    except TrialTimeout as exc:
        return training.ended("timeout", f"{exc}, in epoch {training.epoch}")
    except AssertionError as exc:
        limit = step_limit(exc, spec.solver, "adjoint backward")  # the forward solve raises it itself
        if limit is None:
            raise
        raise limit from exc
