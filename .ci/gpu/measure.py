"""GPU figures of ndebench without Ray or MLflow: one JSON line per measurement, appended to OUT.jsonl.

python measure.py OUT.jsonl WHAT...
  bench:MODEL:GRAPH[:HIDDEN:BATCH[:noadj]]   `ndebench bench` row (100 points, Euler) on cuda, GRAPH auto|on|off;
                                             noadj: the model's solver without the adjoint
  tp:DEVICE:STACK:PROCESSES:TRIALS[:THREADS[:CONFIG]]
                                             `bench throughput` of CONFIG (a YAML beside this file, default
                                             gunpoint_ncde: the GunPoint Neural CDE trial, hidden 16, 5 epochs;
                                             gunpoint_ncde_stack: the same with solver.cuda_graph: stack)
  region:STACK[:HIDDEN[:STEPS[:CONFIG]]]     ms per replayed training step of STACK of CONFIG's trials (default
                                             gunpoint_ncde_stack, hidden 16) as one captured region, without a
                                             regularizer and with the config's: train_ratio inside the region
A failing case is a row with "error" (a finding, not the end of the check).
"""
from __future__ import annotations

import dataclasses
import json
import sys
import time
from pathlib import Path

import torch

OUT = open(sys.argv[1], "a")
HERE = Path(__file__).resolve().parent


def emit(row: dict) -> None:
    line = json.dumps(row)
    print(line, flush=True)
    OUT.write(line + "\n")
    OUT.flush()


def bench(model: str, graph: str, hidden: str = "128", batch: str = "128", adjoint: str = "default") -> dict:
    import ndebench.platform.bench.speed as b
    if adjoint == "noadj":
        info = b.model_info
        b.model_info = lambda name: dataclasses.replace(
            info(name), default_solver=dataclasses.replace(info(name).default_solver, adjoint=False))
    device = "cuda" if torch.cuda.is_available() else "cpu"
    return b.bench_model(b.ModelCase(model, int(hidden), int(batch), 100, device=device, cuda_graph=graph), 10)


def tp(device: str, stack: str, processes: str, trials: str, threads: str = "1", config: str = "gunpoint_ncde") -> dict:
    from ndebench.platform.bench.throughput import bench_throughput
    from ndebench.platform.spec.config import load_spec
    row = bench_throughput(load_spec(str(HERE / f"{config}.yaml")), device=device, stack=int(stack),
                           concurrent=int(processes), trials=int(trials), threads=int(threads), say=lambda s: None)
    return {**row, "trials_per_min": round(row["trials_per_hour"] / 60, 2)}


def region(stack: str, hidden: str = "16", steps: str = "50", config: str = "gunpoint_ncde_stack") -> dict:
    from ndebench.models.base import cat_inputs
    from ndebench.platform.bench.throughput import cell_configs, pick_cell
    from ndebench.platform.failures.deadline import Deadline
    from ndebench.platform.spec.config import load_spec
    from ndebench.platform.worker.spec import TrialSpec
    from ndebench.platform.worker.stack import Stack, _members
    from ndebench.platform.worker.stackgraph import StackRegion

    spec = load_spec(str(HERE / f"{config}.yaml"))
    device = "cuda" if torch.cuda.is_available() else "cpu"
    base = [TrialSpec.from_flat(c) for c in cell_configs(spec, pick_cell(spec, None), int(stack), device)]
    base = [dataclasses.replace(s, model_params={**s.model_params, "hidden_size": int(hidden)}) for s in base]
    row: dict = {"stack": int(stack), "hidden": int(hidden), "device": device}
    for name, specs in (("none", [dataclasses.replace(s, regularizer="none", regularizer_params={}) for s in base]),
                        ("cd", base)):
        members = _members(specs, [None] * len(specs), Deadline(None))
        run = StackRegion(Stack(members[0].built.model), members)
        for m in members:
            m.built.model.train()
        run.weights.bind(run.models, run.optimizers)
        batch = [next(m.built.feeds["train"].batches(m.built.batch_size, None)) for m in members]
        inputs, targets = cat_inputs([b[0] for b in batch]), torch.cat([b[1] for b in batch])
        run.replay(inputs, targets)  # the capture, then one replay
        if device == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(int(steps)):
            run.replay(inputs, targets)
        if device == "cuda":
            torch.cuda.synchronize()
        row[f"ms_{name}"] = round((time.perf_counter() - start) / int(steps) * 1000, 3)
        row[f"batch_{name}"] = int(targets.shape[0])
    return {**row, "train_ratio": round(row["ms_cd"] / row["ms_none"], 3)}


if __name__ == "__main__":
    emit({"kind": "env", "torch": torch.__version__, "cuda": torch.cuda.is_available(),
          "gpu": torch.cuda.get_device_name() if torch.cuda.is_available() else None})
    for what in sys.argv[2:]:
        kind, *args = what.split(":")
        start = time.perf_counter()
        try:
            row = {"bench": bench, "tp": tp, "region": region}[kind](*args)
        except Exception as exc:
            row = {"error": f"{type(exc).__name__}: {exc}"[:800]}
        emit({"kind": kind, "what": what, **row, "wall_s": round(time.perf_counter() - start, 2)})
