"""``ndebench bench``: what Continuum Dropout and the platform cost, measured side by side.

:func:`bench_scale` times ``ndebench report`` on a synthetic study of N evaluate runs. Model rows time, on
random data of a given shape, one training step (forward + backward) without and
with Continuum Dropout, Monte-Carlo evaluation (``n_mc`` passes in one batch) against one deterministic
pass, and the mask draw alone. Every repetition runs all variants once, in a rotated order, so machine
noise hits each variant alike; medians over the repetitions are reported.
"""
from __future__ import annotations

import contextlib
import dataclasses
import itertools
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from ndebench.models.base import DataSpec
from ndebench.models.integrate import METHODS, SolverConfig, TrialRNG, begin_pass
from ndebench.models.registry import create_model, list_models, model_info
from ndebench.platform.worker.stacklayers import with_stack_kernel
from ndebench.regularizers.registry import create_regularizer

ROW_KEYS = ("model", "hidden", "batch", "length", "solver", "device", "n_mc", "train_ms_none", "train_ms_cd",
            "train_ratio", "eval_ms_one", "eval_ms_mc", "mc_ratio", "draw_ms", "graph")
CHANNELS, CLASSES = 3, 10


@dataclass(frozen=True)
class ModelCase:
    """One benchmarked shape: ``batch`` series of ``length`` points, ``CHANNELS`` channels, latent ``hidden``."""

    model: str
    hidden: int
    batch: int
    length: int
    solver: str = "euler"
    device: str = "cpu"
    n_mc: int = 5
    p: float = 0.3
    m: float = 10.0
    cuda_graph: str = "auto"


def timeseries_models() -> list[str]:
    return [name for name in list_models() if model_info(name).input_kind == "timeseries"]


def check_device(device: str) -> torch.device:
    """``cpu`` or ``cuda[:i]``; a clear error where CUDA is asked for and absent."""
    try:
        dev = torch.device(device)
    except RuntimeError:
        raise ValueError(f"unknown device {device!r}; valid: cpu, cuda") from None
    if dev.type not in ("cpu", "cuda"):
        raise ValueError(f"unknown device {device!r}; valid: cpu, cuda")
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ValueError("--device cuda: no CUDA device is visible to torch on this machine; use --device cpu")
    return dev


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def interleaved_medians(fns: dict[str, Callable[[], Any]], reps: int, device: torch.device,
                        warmup: int = 1) -> dict[str, float]:
    """Median milliseconds of each function over ``reps`` rounds; round ``r`` starts at the ``r``-th function."""
    names = list(fns)
    times: dict[str, list[float]] = {name: [] for name in names}
    for r in range(warmup + reps):
        for name in names[r % len(names):] + names[: r % len(names)]:
            _sync(device)
            start = time.perf_counter()
            fns[name]()
            _sync(device)
            if r >= warmup:
                times[name].append(1e3 * (time.perf_counter() - start))
    return {name: statistics.median(values) for name, values in times.items()}


def _build(case: ModelCase, regularizer: str, params: dict[str, Any], times: torch.Tensor, device: torch.device) -> Any:
    torch.manual_seed(0)
    # the model's own solver settings (adjoint or not, as in its reference pipeline) with the asked method
    solver = dataclasses.replace(model_info(case.model).default_solver, method=case.solver, cuda_graph=case.cuda_graph)
    model = create_model(case.model, DataSpec(CHANNELS, CLASSES, times=times), hidden_size=case.hidden,
                         regularizer=create_regularizer(regularizer, **params), solver=solver)
    return with_stack_kernel(model.to(device))  # the layers a trial of it trains with


def bench_model(case: ModelCase, reps: int) -> dict[str, Any]:
    """One JSON row (keys ``ROW_KEYS``) for ``case``; times in milliseconds, ratios CD / none and MC / one."""
    if case.model not in timeseries_models():
        raise ValueError(f"bench times time-series models; {case.model!r} is not one; "
                         f"valid: {', '.join(timeseries_models())}")
    device = check_device(case.device)
    gen = torch.Generator().manual_seed(0)
    times = torch.linspace(0.0, 1.0, case.length)
    values = torch.randn(case.batch, case.length, CHANNELS, generator=gen)
    targets = torch.randint(0, CLASSES, (case.batch,), generator=gen).to(device)
    plain = _build(case, "none", {}, times, device)
    dropout = _build(case, "continuum_dropout", {"p": case.p, "m": case.m, "n_mc": case.n_mc}, times, device)
    dropout.load_state_dict(plain.state_dict())
    inputs = plain.prepare(times.to(device), values.to(device))
    rng = TrialRNG.from_seed(0)

    def train_step(model: Any) -> Callable[[], None]:
        def step() -> None:
            model.train()
            model.zero_grad(set_to_none=True)
            F.cross_entropy(model(inputs, rng), targets).backward()
        return step

    def evaluation(model: Any, n: int) -> Callable[[], None]:
        def run() -> None:
            model.eval()
            model.predict(inputs, rng, n_mc=n)
        return run

    z0 = torch.zeros(case.batch, case.hidden, device=device)
    grid_times = times.to(device)
    dropout.regularizer.train()

    def draw() -> None:
        begin_pass(dropout.regularizer, z0, grid_times, solver=dropout.solver, rng=rng)

    ms = interleaved_medians({
        "train_ms_none": train_step(plain), "train_ms_cd": train_step(dropout),
        "eval_ms_one": evaluation(plain, 1), "eval_ms_mc": evaluation(dropout, case.n_mc), "draw_ms": draw,
    }, reps, device)
    row = {"model": case.model, "hidden": case.hidden, "batch": case.batch, "length": case.length,
           "solver": case.solver, "device": str(device), "n_mc": case.n_mc, **{k: round(v, 3) for k, v in ms.items()},
           "train_ratio": round(ms["train_ms_cd"] / ms["train_ms_none"], 3),
           "mc_ratio": round(ms["eval_ms_mc"] / ms["eval_ms_one"], 3), "graph": dropout.graph_note(device)}
    return {key: row[key] for key in ROW_KEYS}


def bench_models(cases: list[ModelCase], reps: int,
                 on_row: Callable[[dict[str, Any]], None] | None = None) -> list[dict[str, Any]]:
    rows = []
    for case in cases:
        rows.append(bench_model(case, reps))
        if on_row is not None:
            on_row(rows[-1])
    return rows


def model_cases(models: list[str], hiddens: list[int], batches: list[int], **common: Any) -> list[ModelCase]:
    """Every (model, hidden, batch) combination; unknown models or solver methods raise ``ValueError``."""
    valid = timeseries_models()
    for name in models:
        if name not in valid:
            raise ValueError(f"unknown or non-time-series model {name!r} for bench; valid: {', '.join(valid)}")
    if common.get("solver", "euler") not in METHODS:
        raise ValueError(f"unknown solver method {common['solver']!r}; valid: {', '.join(sorted(METHODS))}")
    return [ModelCase(model, h, b, **common) for model, h, b in itertools.product(models, hiddens, batches)]


def bench_draw(*, batch: int, hidden: int, points: int, horizon: float, p: float, m: float, device: str,
               reps: int) -> dict[str, Any]:
    """Median milliseconds of one Continuum Dropout mask draw on a uniform grid of ``points`` over ``[0, horizon]``."""
    dev = check_device(device)
    regularizer = create_regularizer("continuum_dropout", p=p, m=m)
    regularizer.train()
    times = torch.linspace(0.0, horizon, points, device=dev)
    z0 = torch.zeros(batch, hidden, device=dev)
    rng = TrialRNG.from_seed(0)
    solver = SolverConfig("euler")
    ms = interleaved_medians({"draw_ms": lambda: begin_pass(regularizer, z0, times, solver=solver, rng=rng)}, reps, dev)
    return {"batch": batch, "hidden": hidden, "points": points, "horizon": horizon, "p": p, "m": m,
            "device": str(dev), "draw_ms": round(ms["draw_ms"], 3)}


def _tiny_trial_config(seed: int, epochs: int) -> dict[str, Any]:
    return {"study": "bench-platform", "phase": "tune", "cell": "bench", "model": "neural_cde", "dataset": "synthetic",
            "regularizer": "none", "seed": seed, "model.hidden_size": 8, "solver.method": "euler",
            "solver.adjoint": False, "training.epochs": epochs, "training.min_epochs": epochs,
            "training.batch_size": 32, "training.threads": 1}


def _timed_trainable(config: dict[str, Any], *, log_path: str, **kwargs: Any) -> None:
    """The sweep's trainable, appending ``<start> <end>`` (wall clock, seconds) of its own run (MLflow logging +
    run_trial) to ``log_path``."""
    from ndebench.platform.engine.trainable import trainable

    start = time.time()
    trainable(config, **kwargs)
    with open(log_path, "a") as log:
        log.write(f"{start} {time.time()}\n")


def _steady_spacing(ends: list[float], concurrent: int) -> float:
    """Seconds between trial completions once ``concurrent`` workers run: the first ``concurrent`` completions
    also carry the stage's start (Tune's setup, worker processes importing torch), so they open the window."""
    ends = sorted(ends)
    return (ends[-1] - ends[concurrent - 1]) / (len(ends) - concurrent)


def bench_platform(*, trials: int = 12, epochs: int = 2, reuse_actors: bool = False,
                   say: Callable[[str], None] = print) -> dict[str, Any]:
    """The per-trial cost the platform adds, and the speed-up of 2 concurrent 1-CPU trials.

    The same tiny trial (Neural CDE on ``synthetic``, 1 thread, ``epochs`` epochs) runs ``trials`` times
    through :func:`ndebench.platform.worker.loop.run_trial` directly, then ``trials`` times through the sweep's Ray
    Tune trainable (Ray scheduling, worker processes, MLflow logging to a temporary sqlite store, a checkpoint
    every epoch), one at a time and then two at a time, in one Tune run each.

    A Tune run pays once for its start (Tune's setup, each worker process importing torch, the last results
    written): ``stage_start_s``, like ``ray_start_s`` a once-per-stage cost. Per trial, what counts is the
    steady state: the spacing of trial completions after the first ``c`` of ``c`` concurrent workers
    (:func:`_steady_spacing`). ``overhead_s`` = that spacing one at a time minus the direct seconds per
    trial, split into ``in_trial_overhead_s`` (inside the worker: MLflow logging, reporting, checkpoints) and
    ``scheduling_s`` (between trials: Tune's bookkeeping, handing the reused worker its next trial);
    ``concurrency_speedup`` = spacing one at a time / spacing two at a time (2 = perfect).
    """
    import ray
    from ndebench.platform.cluster.joining import loopback_only
    from ndebench.platform.worker.loop import run_trial
    from ndebench.platform.worker.spec import TrialSpec
    from ray import tune

    if trials < 4:
        raise ValueError(f"bench platform needs trials >= 4 (got {trials})")
    configs = [_tiny_trial_config(seed, epochs) for seed in range(trials)]
    torch.set_num_threads(1)
    direct = []
    for config in configs:
        start = time.perf_counter()
        run_trial(TrialSpec.from_flat(config), evaluate_test=False)
        direct.append(time.perf_counter() - start)
    say(f"direct run_trial: median {statistics.median(direct):.2f} s per trial")
    with tempfile.TemporaryDirectory(prefix="ndebench-bench-") as tmp:
        uri = f"sqlite:///{os.path.join(tmp, 'mlflow.db')}"
        start = time.perf_counter()
        started_here = not ray.is_initialized()
        if started_here:
            with loopback_only(None):
                ray.init(num_cpus=2, include_dashboard=False, object_store_memory=128 * 1024**2, log_to_driver=False)
        ray_start = time.perf_counter() - start
        try:
            walls, spacings, runs = {}, {}, {}
            for concurrent in (1, 2):
                # The trainable looks fixed configs up by key, as the sweep's evaluate phase does.
                log_path = os.path.join(tmp, f"trials{concurrent}.txt")
                fn = tune.with_resources(tune.with_parameters(
                    _timed_trainable, log_path=log_path, tracking_uri=uri, parents={},
                    evaluate_configs={str(i): c for i, c in enumerate(configs)},
                    storage_uri=os.path.join(tmp, "ray"), experiment=f"bench{concurrent}"), {"cpu": 1})
                tuner = tune.Tuner(
                    fn, param_space={"trial": tune.grid_search([str(i) for i in range(trials)])},
                    tune_config=tune.TuneConfig(max_concurrent_trials=concurrent, reuse_actors=reuse_actors),
                    run_config=tune.RunConfig(name=f"bench{concurrent}", storage_path=os.path.join(tmp, "ray"),
                                              verbose=0),
                )
                start = time.perf_counter()
                with contextlib.redirect_stdout(sys.stderr):  # Tune's tables; stdout is for the result
                    results = tuner.fit()
                walls[concurrent] = time.perf_counter() - start
                errors = [r.error for r in results if r.error is not None]
                if errors:
                    raise RuntimeError(f"bench platform: a trial failed under Ray: {errors[0]}")
                with open(log_path) as log:
                    spans = [tuple(map(float, line.split())) for line in log.read().splitlines()]
                spacings[concurrent] = _steady_spacing([end for _, end in spans], concurrent)
                runs[concurrent] = statistics.median(end - begin for begin, end in spans)
                say(f"{trials} trial(s) through Ray + MLflow, {concurrent} at a time: {walls[concurrent]:.2f} s, "
                    f"then a trial every {spacings[concurrent]:.2f} s")
        finally:
            if started_here:
                ray.shutdown()
    per_direct = statistics.median(direct)
    return {"trials": trials, "epochs": epochs, "reuse_actors": reuse_actors,
            "direct_s_per_trial": round(per_direct, 3), "platform_s_per_trial": round(spacings[1], 3),
            "overhead_s": round(spacings[1] - per_direct, 3), "in_trial_overhead_s": round(runs[1] - per_direct, 3),
            "scheduling_s": round(spacings[1] - runs[1], 3), "ray_start_s": round(ray_start, 3),
            "stage_start_s": round(walls[1] - trials * spacings[1], 3),
            "wall_s_one_at_a_time": round(walls[1], 3), "wall_s_two_at_a_time": round(walls[2], 3),
            "concurrency_speedup": round(spacings[1] / spacings[2], 3)}


def bench_scale(runs: int, tracking_uri: str | None = None, *, workers: int = 2, figures: str = "auto",
                reuse: bool = False, say: Callable[[str], None] = print) -> dict[str, Any]:
    """Seconds to write a synthetic study of ``runs`` evaluate runs (:mod:`~ndebench.platform.record.synthetic`,
    ``workers`` processes) and to report it as ``ndebench report`` does (``figures`` as its ``--figures``), in a
    temporary sqlite store or through the tracking server at ``tracking_uri`` (a study named uniquely there).
    ``reuse`` (needs ``tracking_uri``): the study is named ``scale-<runs>`` there and, when it exists already, only
    reported (``write_s`` None), so that one write serves several measurements."""
    import uuid
    from pathlib import Path

    from ndebench.platform import api
    from ndebench.platform.record.synthetic import write_study
    from ndebench.platform.record.tracking import study_names

    if reuse and not tracking_uri:
        raise ValueError("bench scale --reuse-study needs --tracking-uri (a temporary store is gone afterwards)")
    with tempfile.TemporaryDirectory(prefix="ndebench-scale-") as tmp:
        uri = tracking_uri or f"sqlite:///{os.path.join(tmp, 'mlflow.db')}"
        study = f"scale-{runs}" + (f"-{uuid.uuid4().hex[:8]}" if tracking_uri and not reuse else "")
        write_s = None
        if reuse and study in study_names(uri):
            say(f"reporting study {study!r} already in {uri}")
        else:
            start = time.perf_counter()
            write_study(uri, study, runs, workers=workers)
            write_s = round(time.perf_counter() - start, 2)
            say(f"wrote {runs} evaluate runs of study {study!r} in {write_s:.1f} s")
        start = time.perf_counter()
        with contextlib.redirect_stdout(sys.stderr):
            api.report_study(study, uri, Path(tmp) / "reports", figures=figures)
        report_s = time.perf_counter() - start
        say(f"reported in {report_s:.1f} s")
    return {"runs": runs, "write_s": write_s, "report_s": round(report_s, 2), "tracking_uri": uri}
