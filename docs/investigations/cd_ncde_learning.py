"""Why Continuum Dropout stops a Neural CDE from learning on GunPoint (issue 24): the measurements.

Runs the issue's setting directly (no Ray, no MLflow): ``neural_cde`` on ``uea/GunPoint``, hidden 16, 1 layer,
lr 0.00205, seed 0, 60 epochs without early stopping, the platform's own model, regularizer, data and
optimiser (Adam, StepLR(10, 0.5), gradient clipping at 10). Each variant prints one JSON line per epoch
(train loss, gradient norm before clipping) and one summary line (final train loss, test accuracy with the
regularizer's own test protocol, and the signal-to-noise ratio of ``z(T)`` under the mask).

    python docs/investigations/cd_ncde_learning.py --variant none --variant cd
    python docs/investigations/cd_ncde_learning.py --list

Signal to noise: for each test sample, ``z(T)`` over ``--draws`` mask draws (trained weights); ``noise`` is the
mean over samples and components of the variance across draws, ``signal`` the variance across samples of
the per-sample mean that the class means explain (between-class variance). ``snr = signal / noise``.
"""
from __future__ import annotations

import argparse
import json
import math
import time
from dataclasses import replace
from typing import Any

import torch
from ndebench.models.integrate import SolverConfig, TrialRNG
from ndebench.platform.spec.config import TrainingConfig
from ndebench.platform.worker import build as trial
from ndebench.platform.worker.build import build_trial
from ndebench.platform.worker.evaluation import evaluate, trial_loss
from ndebench.platform.worker.loop import Training
from ndebench.platform.worker.spec import TrialSpec
from ndebench.regularizers.base import PassSpec
from ndebench.regularizers.continuum_dropout import ContinuumDropout

CD = {"p": 0.1, "m": 5}
BASE = TrialSpec(model="neural_cde", dataset="uea/GunPoint", regularizer="none",
                 seed=0, model_params={"hidden_size": 16, "num_layers": 1},
                 training=TrainingConfig(lr=0.00205, epochs=60, threads=1))
VARIANTS: dict[str, dict[str, Any]] = {
    "none": {},
    "cd": {"regularizer": "continuum_dropout", "regularizer_params": CD},
    "cd-no-adjoint": {"regularizer": "continuum_dropout", "regularizer_params": CD,
                      "solver": SolverConfig(method="euler", adjoint=False)},
    "none-no-adjoint": {"solver": SolverConfig(method="euler", adjoint=False)},
    "cd-rk4": {"regularizer": "continuum_dropout", "regularizer_params": CD,
               "solver": SolverConfig(method="rk4", adjoint=False)},
    "cd-occupancy": {"regularizer": "continuum_dropout", "regularizer_params": {**CD, "mask": "occupancy"},
                     "solver": SolverConfig(method="euler", adjoint=False)},
    "cd-p0.01": {"regularizer": "continuum_dropout", "regularizer_params": {"p": 0.01, "m": 5}},
    "cd-m100": {"regularizer": "continuum_dropout", "regularizer_params": {"p": 0.1, "m": 100}},
    "cd-time-channel": {"regularizer": "continuum_dropout", "regularizer_params": {**CD, "scope": "time"}},
    "cd-rk4-stage": {"regularizer": "continuum_dropout", "regularizer_params": CD, "lookup": "stage",
                     "solver": SolverConfig(method="rk4", adjoint=False)},
    "none-index-time": {"time_scale": "index"},
    "cd-index-time": {"regularizer": "continuum_dropout", "regularizer_params": CD, "time_scale": "index"},
    "ode-none": {"model": "neural_ode"},
    "ode-cd": {"model": "neural_ode", "regularizer": "continuum_dropout", "regularizer_params": CD},
    "lnsde-none": {"model": "neural_lnsde"},
    "lnsde-cd": {"model": "neural_lnsde", "regularizer": "continuum_dropout", "regularizer_params": CD},
}


class StageDropout(ContinuumDropout):
    """The mask looked up at every solver stage time, ``I(t)`` from the switching times, not held per step."""

    def draw(self, spec: PassSpec) -> Any:
        return super().draw(replace(spec, grid=None))


def patched(spec: TrialSpec, lookup: str | None, time_scale: str | None) -> Any:
    """``build_trial`` with the variant's mask lookup (per solver stage) and time scale swapped in."""
    create = trial.create_dataset
    if time_scale == "index":
        def create_dataset(*args: Any, **kwargs: Any) -> Any:
            bundle = create(*args, **kwargs)
            return replace(bundle, times=bundle.times * (len(bundle.times) - 1))
        trial.create_dataset = create_dataset
    try:
        built = build_trial(spec)
    finally:
        trial.create_dataset = create
    if lookup == "stage":
        built.model.regularizer = StageDropout(**spec.regularizer_params)
    return built


def grad_norm(model: torch.nn.Module) -> float:
    return math.sqrt(sum(float(p.grad.pow(2).sum()) for p in model.parameters() if p.grad is not None))


@torch.no_grad()
def signal_to_noise(model: Any, feed: Any, draws: int, seed: int) -> dict[str, float]:
    """Between-class variance of the per-sample mean of ``z(T)`` over the mean within-sample variance across
    ``draws`` mask draws (regularizer kept on, as at training)."""
    model.train()
    model.head.eval()
    rng = TrialRNG.from_seed(seed + 12345)
    zs, ys = [], []
    for inputs, y in feed.batches(10_000, None):
        zs.append(torch.stack([model.latent(inputs, rng) for _ in range(draws)]))
        ys.append(y)
    z, y = torch.cat(zs, dim=1), torch.cat(ys)
    noise = float(z.var(0).mean())
    mean = z.mean(0)
    grand = mean.mean(0)
    between = sum(float((y == c).sum()) * float((mean[y == c].mean(0) - grand).pow(2).mean())
                  for c in y.unique()) / len(y)
    return {"noise_var": noise, "between_class_var": between, "snr": between / noise if noise > 0 else math.inf}


def run(name: str, epochs: int, draws: int, dataset: str = BASE.dataset) -> dict[str, Any]:
    change = dict(VARIANTS[name])
    lookup, time_scale = change.pop("lookup", None), change.pop("time_scale", None)
    spec = replace(BASE, dataset=dataset, **change)
    spec = replace(spec, training=replace(spec.training, epochs=epochs))
    built = patched(spec, lookup, time_scale)
    state = Training(built, spec.training, spec.seed)
    model, losses = built.model, []
    for epoch in range(1, epochs + 1):
        model.train()
        start, total, count, norms = time.perf_counter(), 0.0, 0, []
        for inputs, targets in built.feeds["train"].batches(built.batch_size, state.rng.shuffle):
            state.optimizer.zero_grad(set_to_none=True)
            loss = trial_loss(model(inputs, state.rng), targets, built.pos_weight) + model.penalty()
            loss.backward()
            norms.append(grad_norm(model))
            torch.nn.utils.clip_grad_norm_(model.parameters(), spec.training.grad_clip)
            state.optimizer.step()
            total, count = total + loss.item() * len(targets), count + len(targets)
        state.scheduler.step()
        losses.append(total / count)
        print(json.dumps({"variant": name, "epoch": epoch, "train_loss": round(losses[-1], 4),
                          "grad_norm": round(sum(norms) / len(norms), 4),
                          "seconds": round(time.perf_counter() - start, 2)}), flush=True)
    test, _ = evaluate(model, built.feeds["test"], built.batch_size, spec.seed)
    summary = {"variant": name, "dataset": dataset, "final_train_loss": round(losses[-1], 4),
               "min_train_loss": round(min(losses), 4), "test_accuracy": round(test["accuracy"], 4)}
    if spec.regularizer == "none":
        # the mask's effect on weights that did learn: the same model, the same mask drawn at p, m of "cd"
        model.regularizer = ContinuumDropout(**CD)
    summary.update({k: round(v, 5) for k, v in signal_to_noise(model, built.feeds["test"], draws, 0).items()})
    if spec.regularizer == "none":
        masked, _ = evaluate(model, built.feeds["test"], built.batch_size, spec.seed)
        summary["test_accuracy_with_cd_mask_mc5"] = round(masked["accuracy"], 4)
    print(json.dumps(summary), flush=True)
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--variant", action="append", choices=sorted(VARIANTS), help="repeatable")
    parser.add_argument("--epochs", type=int, default=60)
    parser.add_argument("--dataset", default=BASE.dataset, help="default: %(default)s (the model stays as set)")
    parser.add_argument("--draws", type=int, default=20, help="mask draws for the signal-to-noise ratio")
    parser.add_argument("--list", action="store_true", help="list the variants and exit")
    args = parser.parse_args()
    if args.list:
        for name, change in VARIANTS.items():
            print(name, change)
        return
    for name in args.variant or ["none", "cd"]:
        run(name, args.epochs, args.draws, args.dataset)


if __name__ == "__main__":
    main()
