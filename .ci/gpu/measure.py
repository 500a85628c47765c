"""GPU figures of ndebench without Ray or MLflow: one JSON line per measurement, appended to OUT.jsonl.

python measure.py OUT.jsonl WHAT...
  bench:MODEL:GRAPH[:HIDDEN:BATCH[:noadj]]   `ndebench bench` row (100 points, Euler) on cuda, GRAPH auto|on|off;
                                             noadj: the model's solver without the adjoint
  tp:DEVICE:STACK:PROCESSES:TRIALS[:THREADS[:CONFIG]]
                                             `bench throughput` of CONFIG (a YAML beside this file, default
                                             gunpoint_ncde: the GunPoint Neural CDE trial, hidden 16, 5 epochs)
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


if __name__ == "__main__":
    emit({"kind": "env", "torch": torch.__version__, "cuda": torch.cuda.is_available(),
          "gpu": torch.cuda.get_device_name() if torch.cuda.is_available() else None})
    for what in sys.argv[2:]:
        kind, *args = what.split(":")
        start = time.perf_counter()
        try:
            row = {"bench": bench, "tp": tp}[kind](*args)
        except Exception as exc:
            row = {"error": f"{type(exc).__name__}: {exc}"[:800]}
        emit({"kind": kind, "what": what, **row, "wall_s": round(time.perf_counter() - start, 2)})
