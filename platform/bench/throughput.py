"""``ndebench bench throughput CONFIG``: trials per hour of one evaluate cell of a sweep config on this machine.

The trials are the cell's evaluate trials as a sweep would run them (the config's model, data, training,
solver and early stopping; a searched hyperparameter at a fixed value, :func:`fixed_value`), without Ray and
MLflow: ``concurrent`` processes, each training its share of the seeds in stacks of ``stack``
(:func:`~ndebench.platform.worker.stack.run_stack`) with the torch threads a sweep's Ray worker gets (Ray sets
``OMP_NUM_THREADS`` to the trial's ``resources.cpu``). So ``--stack``, ``--concurrent`` and ``--device``
compare the ways to spend a machine on the same trials.
"""
from __future__ import annotations

import math
import multiprocessing
import os
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

from ndebench.platform.spec.sweepspec import Space, SweepSpec


def fixed_value(value: Any) -> Any:
    """A config value as one trial takes it: a fixed value as is; of a searched one (:class:`Space`), the first
    choice, the midpoint of a ``uniform`` range or ``randint``'s low end, the geometric midpoint of a
    ``loguniform`` one."""
    if not isinstance(value, Space):
        return value
    if value.kind == "choice":
        return value.args[0]
    low, high = value.args[:2]
    if value.kind == "loguniform":
        return math.sqrt(low * high)
    return low if value.kind == "randint" else (low + high) / 2


def pick_cell(spec: SweepSpec, cell: str | None) -> tuple[str, str, str]:
    """``MODEL/DATASET/REGULARIZER`` (a dataset name may hold ``/``) among the config's cells, or its first cell;
    a cell the config lacks raises ``ValueError`` listing the valid ones."""
    cells = spec.cells()
    if cell is None:
        return cells[0]
    model, _, rest = cell.partition("/")
    dataset, _, regularizer = rest.rpartition("/")
    if (model, dataset, regularizer) not in cells:
        valid = ", ".join("/".join(c) for c in cells)
        raise ValueError(f"--cell {cell!r} is not a cell of {spec.study!r}; valid: {valid}")
    return model, dataset, regularizer


def cell_configs(spec: SweepSpec, cell: tuple[str, str, str], trials: int, device: str) -> list[dict[str, Any]]:
    """The flat evaluate configs of ``trials`` trials of ``cell``: the config's evaluate seeds first, then the
    next integers."""
    seeds = list(spec.evaluate.seeds)
    seeds += range(max(seeds) + 1, max(seeds) + 1 + max(0, trials - len(seeds)))
    base = {key: fixed_value(value) for key, value in spec.base_config(*cell).items()}
    return [dict(base, phase="evaluate", seed=seed, device=device) for seed in seeds[:trials]]


def _work(configs: list[dict[str, Any]], stack: int, threads: int, barrier: Any, out: Any) -> None:
    """One process: wait for the others, then train ``configs`` in stacks of ``stack``; put (start, end, statuses,
    notes, CPU seconds, members per stacked epoch) on ``out``."""
    import torch
    from ndebench.platform.worker.spec import TrialSpec
    from ndebench.platform.worker.stack import run_stack

    torch.set_num_threads(threads)
    torch.optim.Adam([torch.zeros(1, requires_grad=True)])  # a process's first optimizer imports torch._dynamo (s)
    specs = [TrialSpec.from_flat(config) for config in configs]
    notes: list[str] = []
    if barrier is not None:
        barrier.wait()
    start, cpu = time.time(), time.process_time()
    statuses: list[str] = []
    widths: list[int] = []
    for first in range(0, len(specs), stack):
        statuses += [r.status for r in run_stack(specs[first:first + stack], note=notes.append, widths=widths)]
    out.put((start, time.time(), statuses, notes, time.process_time() - cpu, widths))


def bench_throughput(spec: SweepSpec, *, cell: str | None = None, device: str = "cpu", stack: int = 1,
                     concurrent: int = 1, trials: int | None = None, threads: int | None = None,
                     say: Callable[[str], None] = print) -> dict[str, Any]:
    """Trials per hour of one evaluate cell of ``spec`` (its first, or ``cell``) on this machine.

    ``trials`` (default: the config's evaluate seeds, at least ``stack * concurrent``) trials are dealt round-robin
    to ``concurrent`` processes that start together and train their share in stacks of ``stack``; each trial
    gets ``threads`` torch threads (default: ``training.threads``, else ``resources.cpu`` rounded up).
    ``trials_per_hour = trials / wall * 3600``, ``wall`` from the first process's start to the last one's end
    (imports before the start are left out, as a sweep's reused workers pay them once; each trial's data
    loading is in). ``trials_per_cpu_hour`` divides by the processes' CPU seconds instead (``cpu_s``, all their
    threads): on a machine other work shares, the figure that does not move with that work.
    ``mean_active_members``: the members a stacked epoch trains, on average over the stacked epochs (1.0 when no
    epoch was stacked)."""
    from ndebench.platform.bench.speed import check_device

    if stack < 1 or concurrent < 1:
        raise ValueError(f"--stack and --concurrent must be at least 1 (got {stack}, {concurrent})")
    check_device(device)
    chosen = pick_cell(spec, cell)
    count = trials or max(len(spec.evaluate.seeds), stack * concurrent)
    configs = cell_configs(spec, chosen, count, device)
    threads = threads or int(spec.training.get("threads") or math.ceil(spec.resources.cpu))
    shares = [configs[i::concurrent] for i in range(concurrent)]
    say(f"bench throughput: {'/'.join(chosen)}, {count} trial(s) on {device}, stack {stack}, {concurrent} "
        f"process(es) x {threads} thread(s)")
    if concurrent == 1:
        out: Any = _Box()
        _work(shares[0], stack, threads, None, out)
        results = out.items
    else:
        context = multiprocessing.get_context("spawn")
        queue, barrier = context.Queue(), context.Barrier(concurrent)
        processes = [context.Process(target=_work, args=(share, stack, threads, barrier, queue)) for share in shares]
        for process in processes:
            process.start()
        results = [queue.get() for _ in processes]
        for process in processes:
            process.join()
    wall = max(r[1] for r in results) - min(r[0] for r in results)
    cpu = sum(r[4] for r in results)
    statuses = Counter(s for r in results for s in r[2])
    widths = [w for r in results for w in r[5]]
    return {"trials_per_hour": round(count / wall * 3600, 1), "device": device, "stack": stack,
            "mean_active_members": round(sum(widths) / len(widths), 2) if widths else 1.0,
            "trials_per_cpu_hour": round(count / cpu * 3600, 1), "cpu_s": round(cpu, 3),
            "concurrent": concurrent, "threads": threads, "trials": count, "wall_s": round(wall, 3),
            "cell": "/".join(chosen), "statuses": dict(statuses),
            "notes": sorted({n for r in results for n in r[3]}), "cpus": os.cpu_count()}


# The (stack, processes) layouts that `bench throughput --best` tries on a GPU, in order. The eager stacks' best on
# an H200 (2026-11-29) was 64 x 4; a stack as one captured region may move it (docs/performance.md).
GPU_LAYOUTS = ((16, 1), (64, 1), (64, 4), (128, 4))


# The stack sizes `bench throughput --best` tries on the CPU up to the config's resources.stack, which it tries last.
CPU_STACKS = (1, 4, 16)


def layouts(device: str, cpus: int, stack: int) -> list[tuple[int, int]]:
    """The ``(stack, processes)`` layouts :func:`best_throughput` tries on ``device``: :data:`GPU_LAYOUTS` on a GPU;
    on the CPU one process per core, with trials one at a time, then in the stacks of :data:`CPU_STACKS` below
    ``stack`` (the config's ``resources.stack``), then in stacks of ``stack``: the sizes a sweep of it would use."""
    if device.startswith("cuda"):
        return list(GPU_LAYOUTS)
    return [(size, cpus) for size in sorted({s for s in CPU_STACKS if s < stack} | {stack, 1})]


def best_throughput(measure: Callable[[int, int], dict[str, Any]], candidates: list[tuple[int, int]],
                    say: Callable[[str], None] = print) -> dict[str, Any]:
    """The row of ``measure(stack, processes)`` (a :func:`bench_throughput` row) with the most trials per hour among
    ``candidates``, tried in order until one trains fewer trials per hour than the best before it (a bigger
    layout that loses ends the search); ``tried`` lists every layout run with its rate and, where the first layout
    trains one trial at a time, ``vs_one``: its rate over that one's (the best row too)."""
    best: dict[str, Any] | None = None
    tried = []
    one = None
    for stack, processes in candidates:
        row = measure(stack, processes)
        rate = row["trials_per_hour"]
        one = one if one is not None else (rate if stack == 1 else 0.0)
        ratio = {"vs_one": round(rate / one, 2)} if one else {}
        tried.append({"stack": stack, "concurrent": processes, "trials_per_hour": rate, **ratio})
        say(f"bench throughput --best: stack {stack} x {processes} process(es): {rate} trials/h"
            + (f", {ratio['vs_one']}x one at a time" if ratio else "")
            + (f", {row['mean_active_members']} members per stacked epoch" if "mean_active_members" in row else ""))
        if best is not None and rate < best["trials_per_hour"]:
            break
        if best is None or rate >= best["trials_per_hour"]:
            best = {**row, **ratio}
    if best is None:
        raise ValueError("bench throughput --best: no layout to try")
    return {**best, "tried": tried}


class _Box:
    """What :func:`_work` puts, kept in this process."""

    def __init__(self) -> None:
        self.items: list[Any] = []

    def put(self, item: Any) -> None:
        self.items.append(item)
