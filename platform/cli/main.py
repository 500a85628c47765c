"""The ``ndebench`` command line: run, validate, report, ui, server, rates, list, datasets."""
from __future__ import annotations

import argparse
import gc
import json
import os
import shlex
import signal
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ndebench.platform.cli.arguments import build_parser
from ndebench.platform.cli.configcheck import data_problems, lint, load, located
from ndebench.platform.cli.resuming import complete_study_note, ndebench_command, resume_command
from ndebench.platform.cli.serving import cmd_grant, cmd_server, cmd_ui, tracking_uri
from ndebench.platform.common.collector import for_startup
from ndebench.platform.failures import exitcodes

if TYPE_CHECKING:
    from ndebench.platform.report.study import Report
    from ndebench.platform.spec.sweepspec import SweepSpec


class CommandError(Exception):
    """A command cannot do what was asked (nothing to report, ...): printed as one line, exit status 2."""


def cmd_validate(args: argparse.Namespace) -> int:
    if (code := lint(args)) is not None:
        return code
    from ndebench.platform.engine.runchecks import resource_warnings, size_warnings
    from ndebench.platform.spec.buildcheck import check_models_build, tpe_warnings
    from ndebench.platform.spec.describe import describe_spec, total_trials
    from ndebench.platform.spec.extensions import extension_warnings
    from ndebench.platform.spec.sweepspec import ConfigError

    spec = load(args)
    if isinstance(spec, int):
        return spec
    try:
        built = check_models_build(spec)
    except ConfigError as exc:
        return located(args, exc)
    corrupt, absent = data_problems(spec, args.data_dir or spec.data_dir)
    for problem in corrupt:
        print(f"ndebench validate: error: {problem}", file=sys.stderr)
    if corrupt:
        return exitcodes.BAD_INPUT
    print(f"{args.config}: valid ({built} model configuration(s) built, {len(spec.datasets)} dataset(s) read)")
    for warning in (tpe_warnings(spec) + extension_warnings(spec) + resource_warnings(spec) + absent
                    + size_warnings(total_trials(spec))):
        print(f"warning: {warning}")
    print(describe_spec(spec))
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    from ndebench.platform.cluster.joining import ray_address

    if (code := lint(args)) is not None:
        return code
    try:
        ray_address(args.address)
    except ValueError as exc:  # answered here, before the error path imports MLflow
        print(f"ndebench run: error: {exc}", file=sys.stderr)
        return exitcodes.BAD_INPUT
    from ndebench.platform import api
    from ndebench.platform.failures.diskfull import DiskFullError
    from ndebench.platform.failures.stopping import describe

    if not args.verbose:
        from ndebench.platform.engine.progress import quiet_libraries

        quiet_libraries()
    spec = load(args)
    if isinstance(spec, int):
        return spec
    try:
        result = api.run(spec, uri=args.tracking_uri, out_dir=args.out, storage_path=args.storage_path,
                         address=args.address, resume=args.resume, data_dir=args.data_dir, verbose=args.verbose,
                         retry_diverged=args.retry_diverged, single_node=args.single_node,
                         progress_every_s=args.progress_every, on_step=_run_printer(args, spec))
    except KeyboardInterrupt as exc:
        what, code = describe(exc)
        print(f"[ndebench] exit {code}: interrupted by {what}; this continues study {spec.study!r} (cut-off trials "
              f"from their checkpoints):\n  {resume_command(args)}", flush=True)
        return code
    except DiskFullError as exc:
        print(f"[ndebench] exit {exitcodes.INFRASTRUCTURE}: {exc}", flush=True)
        return exitcodes.INFRASTRUCTURE
    failed, ending = result.outcome.failed, result.exit
    if failed:
        print(f"\n{len(failed)} cell(s) failed (fix and rerun with --resume to retry only them):")
        for label, message in failed.items():
            print(f"  {label}: {message}")
    print(f"\nOpen the study's results in the MLflow UI with:  "
          f"{shlex.join([ndebench_command(), 'ui', '--study', spec.study, '--tracking-uri', result.tracking_uri])}")
    if ending.code == exitcodes.OK:
        print(f"[ndebench] {ending.ok_line()}", flush=True)
    else:
        rerun = " (`ndebench run ... --resume` reruns them)" if ending.code == exitcodes.FAILED else ""
        print(f"[ndebench] exit {ending.code}: {'; '.join(ending.problems)}{rerun}", flush=True)
    return ending.code


def _run_printer(args: argparse.Namespace, spec: SweepSpec) -> Callable[..., None]:
    """What ``ndebench run`` prints at each step of :func:`~ndebench.platform.api.run` (its ``on_step``)."""
    from ndebench.platform.engine.runchecks import size_warnings
    from ndebench.platform.spec.describe import describe_spec, total_trials

    def show(step: str, **facts: Any) -> None:
        if step == "checked":
            print(describe_spec(spec), flush=True)
            for warning in facts["warnings"] + size_warnings(total_trials(spec)):
                print(f"warning: {warning}", flush=True)
            if note := complete_study_note(args, spec.study, facts["uri"]):
                print(note, flush=True)
        elif step == "swept":
            outcome = facts["outcome"]
            print(f"[ndebench] sweep done: {outcome.evaluated} evaluate trial(s) run, {outcome.skipped} reused, "
                  f"{len(outcome.failed)} failed cell(s); Ray's full output: {outcome.log_file}", flush=True)
        elif step == "reported":
            _show_report(facts["report"], spec.study, Path(args.out))
        elif step == "report stopped":
            print(f"[ndebench] report not complete: {facts['message']}", flush=True)
        elif step == "no report":
            print(f"[ndebench] no report: {facts['error']}", flush=True)

    return show


def _report(study: str, uri: str, out: Path, test: str | None, alpha: float | None, correction: str | None = None,
            failed: dict[str, str] | None = None, figures: str | None = None, paper: bool = False) -> None:
    from ndebench.platform import api

    rep = api.report_study(study, uri, out, test=test, alpha=alpha, correction=correction, failed=failed,
                           figures=figures, paper=paper)
    _show_report(rep, study, out, paper)


def _show_report(rep: Report | None, study: str, out: Path, paper: bool = False) -> None:
    if rep is None:
        print(f"no evaluate run of study {study!r} finished, so no report was written", flush=True)
        return
    print(rep.console)
    if paper:
        from ndebench.platform.report.render.sections import to_markdown

        print("".join("\n" + to_markdown(s) for s in rep.files.paper))
    print(f"\nreport written to {out.resolve() / study} ({', '.join(p.name for p in rep.paths)}) "
          f"and logged to the study's MLflow run")


def cmd_report(args: argparse.Namespace) -> int:
    from ndebench.platform import api
    from ndebench.platform.report.statistics.stats import check_alpha
    from ndebench.platform.spec.config import check_study_name

    check_study_name(args.study)
    if args.alpha is not None:
        check_alpha(args.alpha)
    uri = tracking_uri(args)
    settings = api.study_report_settings(args.study, uri, test=args.test, alpha=args.alpha,
                                         correction=args.correction, figures=args.figures)
    shown = settings | {"test": settings["test"] or "design (paired under the paper protocol, else student)"}
    print("[ndebench] report settings: " + " ".join(f"{k}={v}" for k, v in shown.items())
          + " (the study's recorded config, unless given as flags)", flush=True)
    _report(args.study, uri, Path(args.out), figures=settings.pop("figures"), paper=args.paper, **settings)
    return 0


def cmd_verify(args: argparse.Namespace) -> int:
    from ndebench.platform import api
    from ndebench.platform.spec.config import check_study_name

    check_study_name(args.study)
    verified = api.verify(args.study, tracking_uri(args), args.fingerprint)
    print("\n".join(verified.lines), flush=True)
    return exitcodes.OK if verified.ok else exitcodes.FAILED


def cmd_reevaluate(args: argparse.Namespace) -> int:
    from ndebench.platform import api
    from ndebench.platform.engine.reevaluate import parse_n_mc

    n_mc = parse_n_mc(args.n_mc)
    uri = tracking_uri(args)
    created = api.reevaluate(args.study, n_mc, uri, data_dir=args.data_dir, log=lambda line: print(line, flush=True))
    print(f"[ndebench] {len(created)} reevaluate run(s) recorded in study {args.study!r}; "
          f"`ndebench report --study {args.study}` adds the MC-samples table")
    return 0


def cmd_rates(args: argparse.Namespace) -> int:
    from ndebench.regularizers.rates import asymptotic_rates, dropout_rate, expected_renewals, solve_rates

    rates = solve_rates(args.p, args.m, args.T)
    approx = asymptotic_rates(args.p, args.m, args.T)
    result = {
        "p": args.p, "m": args.m, "T": args.T, "lambda1": rates.lambda1, "lambda2": rates.lambda2,
        "check_p": dropout_rate(rates.lambda1, rates.lambda2, args.T),
        "check_m": expected_renewals(rates.lambda1, rates.lambda2, args.T),
        "asymptotic_lambda1": approx.lambda1, "asymptotic_lambda2": approx.lambda2,
    }
    if args.plot:
        from ndebench.platform.report.render.trajectories import plot_rate_paths

        plot_rate_paths(args)
    if args.json:
        print(json.dumps(result))
    else:
        print(f"lambda1 = {rates.lambda1:.10g}   (active periods ~ Exp(lambda1), mean {1 / rates.lambda1:.4g})")
        print(f"lambda2 = {rates.lambda2:.10g}   (inactive periods ~ Exp(lambda2), mean {1 / rates.lambda2:.4g})")
        print(f"check: p = {result['check_p']:.12g}, m = {result['check_m']:.12g}")
        print(f"large-T approximation: lambda1 ~ {approx.lambda1:.6g}, lambda2 ~ {approx.lambda2:.6g}")
    return 0


def cmd_page(args: argparse.Namespace) -> int:
    from ndebench.platform.report.render.page import write_page

    code, message = write_page(Path(args.template), Path(args.out) if args.out else None, check=args.check)
    print(message)
    return code


def cmd_list(args: argparse.Namespace) -> int:
    if args.what == "models":
        from ndebench.models.registry import list_models, model_info

        for name in list_models():
            info = model_info(name)
            print(f"{name:28s} [{info.input_kind}, {info.family}] {info.summary}\n{'':28s} {info.paper}")
    elif args.what == "regularizers":
        from ndebench.models.registry import list_models, model_info
        from ndebench.regularizers.registry import list_regularizers, regularizer_info

        for name in list_regularizers():
            info = regularizer_info(name)
            space = ", ".join(f"{k} = {hp.choices[0]}" if len(hp.choices) == 1 else f"{k} in {list(hp.choices)}"
                              for k, hp in info.hyperparams.items())
            refused = [model for model in list_models() if info.incompatible(model_info(model))]
            print(f"{name:22s} {info.summary}" + (f"\n{'':22s} default search: {space}" if space else "")
                  + (f"\n{'':22s} not with: {', '.join(refused)}" if refused else ""))
    else:
        from ndebench.datasets.registry import dataset_info, list_datasets

        for name in list_datasets():
            print(f"{name:40s} {dataset_info(name).summary}")
    return 0


def cmd_configs(args: argparse.Namespace) -> int:
    from ndebench.platform.spec.shipped import describe_shipped

    for name, description in describe_shipped():
        print(f"{name:40s} {description}")
    return 0


def cmd_datasets(args: argparse.Namespace) -> int:
    from ndebench.datasets.check import check_dataset, dataset_status, dataset_statuses

    if args.action == "import":
        from ndebench.datasets.importer import import_sets

        import_sets(args.data_dir, args.sources, say=lambda line: print(line, flush=True))
        return 0
    if args.action == "list":
        statuses = dataset_statuses(args.data_dir)
        print(f"data directory: {statuses[0]['data_dir']} (paper: one of the paper's sets; imported: found in the "
              "data directory only, e.g. by `ndebench datasets import`)")
        for status in statuses:
            where = status["source"] if status["available"] else "missing"
            print(f"{status['name']:40s} {'yes' if status['available'] else 'no ':3s}  {status['shape']:45s} "
                  f"{status['origin']:8s} {where}")
        return 0
    status = dataset_status(args.name, args.data_dir)
    if not status["available"]:
        print(status["problem"], file=sys.stderr)
        return 1
    print(f"checking {args.name} from {status['source']} (expected {status['shape']}) ...", flush=True)
    problems = check_dataset(args.name, args.data_dir)
    for problem in problems:
        print(f"  problem: {problem}")
    print(f"{args.name}: {'OK' if not problems else f'{len(problems)} problem(s)'}")
    return 1 if problems else 0


def cmd_bench(args: argparse.Namespace) -> int:
    import torch
    from ndebench.platform.bench import speed as bench

    if args.threads:
        torch.set_num_threads(args.threads)
    say = (lambda message: print(message, file=sys.stderr, flush=True)) if args.json else print
    if (args.config is not None) != (args.target == "throughput"):
        raise ValueError("bench throughput needs a CONFIG, and only bench throughput takes one")
    if args.target == "throughput":
        from ndebench.platform import api
        from ndebench.platform.bench.throughput import bench_throughput, best_throughput, layouts

        spec = api.load(args.config)

        def measure(stack: int, concurrent: int) -> dict:
            return bench_throughput(spec, cell=args.cell, device=args.device, stack=stack, concurrent=concurrent,
                                    trials=args.trials, threads=args.threads, say=say)

        if args.best and (args.stack is not None or args.concurrent != 1):
            raise ValueError("bench throughput --best chooses the stack and the processes itself: drop --stack "
                             f"{args.stack} and --concurrent {args.concurrent}")
        result = (best_throughput(measure, layouts(args.device, os.cpu_count() or 1, spec.resources.stack), say)
                  if args.best else measure(args.stack or spec.resources.stack, args.concurrent))
        print(json.dumps(result) if args.json else "\n".join(f"{key:16s} {value}" for key, value in result.items()))
        return 0
    if args.target == "platform":
        result = bench.bench_platform(trials=args.trials or 12, epochs=args.epochs, reuse_actors=args.reuse_actors,
                                      say=say)
        if args.json:
            print(json.dumps(result))
        else:
            for key, value in result.items():
                print(f"{key:24s} {value}")
        return 0
    if args.target == "scale":
        if (args.runs is None) == (args.trials is None):
            raise ValueError("bench scale needs one of --runs N (evaluate runs of a synthetic study, timing the "
                             "report) or --trials N (trivial trials in one stage, timing the driver)")
        if args.trials is not None:
            from ndebench.platform.bench.scale import bench_trials

            result = bench_trials(args.trials, nodes=args.nodes, cpus_per_node=args.cpus_per_node,
                                  tracking_uri=args.tracking_uri, say=say)
        else:
            result = bench.bench_scale(args.runs, args.tracking_uri, workers=args.workers, figures=args.figures,
                                       reuse=args.reuse_study, say=say)
        print(json.dumps(result) if args.json else "\n".join(f"{key:14s} {value}" for key, value in result.items()))
        return 0
    if args.target == "draw":
        points = args.length or 161
        result = bench.bench_draw(batch=args.batch[0] if args.batch else 256,
                                  hidden=args.hidden[0] if args.hidden else 512,
                                  points=points, horizon=args.horizon or points - 1.0, p=args.p,
                                  m=args.m if args.m is not None else 100.0,
                                  device=args.device, reps=args.reps)
        print(json.dumps(result) if args.json else
              f"mask draw, batch {result['batch']} x hidden {result['hidden']}, {points} grid points over "
              f"[0, {result['horizon']:g}], p {args.p:g}, m {result['m']:g}, {result['device']}: "
              f"{result['draw_ms']:.1f} ms")
        return 0
    cases = bench.model_cases(
        args.models.split(","), args.hidden or [16, 128], args.batch or [64, 128], length=args.length or 100,
        solver=args.solver, device=str(bench.check_device(args.device)), n_mc=args.n_mc, p=args.p,
        cuda_graph=args.cuda_graph,
        m=args.m if args.m is not None else 10.0,
    )
    if not args.json:
        print(f"{'model':14s} {'hidden':>6s} {'batch':>5s} {'len':>4s}  train ms none / CD (ratio)   "
              f"eval ms one / MC{args.n_mc} (ratio)   draw ms", flush=True)

    def show(row: dict) -> None:
        if not args.json:
            print(f"{row['model']:14s} {row['hidden']:6d} {row['batch']:5d} {row['length']:4d}  "
                  f"{row['train_ms_none']:8.1f} / {row['train_ms_cd']:8.1f} ({row['train_ratio']:.3f})   "
                  f"{row['eval_ms_one']:8.1f} / {row['eval_ms_mc']:8.1f} ({row['mc_ratio']:.3f})   "
                  f"{row['draw_ms']:7.2f}",
                  flush=True)
        else:
            say(f"[bench] {row['model']} hidden {row['hidden']} batch {row['batch']}: done")

    rows = bench.bench_models(cases, args.reps, on_row=show)
    if args.json:
        print(json.dumps({"rows": rows}))
    return 0


COMMANDS = {"run": cmd_run, "validate": cmd_validate, "report": cmd_report, "reevaluate": cmd_reevaluate,
            "ui": cmd_ui, "server": cmd_server, "grant": cmd_grant, "rates": cmd_rates, "datasets": cmd_datasets,
            "bench": cmd_bench, "list": cmd_list, "configs": cmd_configs, "verify": cmd_verify, "page": cmd_page}


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``ndebench`` console script."""
    parser = build_parser()
    args = parser.parse_args(argv)
    # MLflow's tqdm bar for each artifact download (a report reads the study's sweep.yaml) is noise in a log.
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    if args.command == "datasets" and args.action == "check" and not args.name:
        parser.error("datasets check needs a dataset NAME (see `ndebench datasets list`)")
    try:
        return COMMANDS[args.command](args)
    except Exception as exc:
        # Only here, so that --help, --version and a config with errors answer without torch, Ray or MLflow.
        from ndebench.platform.common.registry import UnknownNameError
        from ndebench.platform.failures.credentials import credentials_refused
        from ndebench.platform.failures.diskfull import disk_full, is_disk_full
        from ndebench.platform.failures.infrastructure import infrastructure_failure
        from ndebench.platform.failures.outage import outage
        from ndebench.platform.record.store import default_tracking_uri, sqlite_path
        from ndebench.platform.spec.sweepspec import ConfigError

        uri = getattr(args, "tracking_uri", None) or default_tracking_uri()
        if is_disk_full(exc):
            database = sqlite_path(uri)
            error = disk_full(exc, os.getcwd(), str(database) if database else None)
            print(f"ndebench {args.command}: error: {error}", file=sys.stderr)
            return exitcodes.INFRASTRUCTURE
        if refusal := credentials_refused(exc, uri):
            print(f"ndebench {args.command}: error: {refusal}", file=sys.stderr)
            return exitcodes.BAD_INPUT
        # Checked before the bad-input types: requests' connection errors are OSErrors.
        if cause := outage(exc, uri) or infrastructure_failure(exc, uri, os.getcwd()):
            print(f"ndebench {args.command}: error: {cause}", file=sys.stderr)
            return exitcodes.INFRASTRUCTURE
        if not isinstance(exc, (ConfigError, UnknownNameError, CommandError, ValueError, OSError, RuntimeError)):
            raise
        print(f"ndebench {args.command}: error: {exc}", file=sys.stderr)
        return exitcodes.BAD_INPUT


def run() -> None:
    """Console-script entry: ``main`` with Unix pipe behaviour (``ndebench list models | head`` ends quietly)."""
    if hasattr(signal, "SIGPIPE"):
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    for_startup()
    try:
        code = main()
    except KeyboardInterrupt:
        # Ctrl-C outside a sweep (while loading torch, validating, reporting): a line, not a traceback.
        print("ndebench: interrupted (Ctrl-C)", file=sys.stderr)
        code = exitcodes.INTERRUPTED
    # The interpreter's last collections walk every object still alive (after a sweep: torch, Ray, MLflow, pandas,
    # about 2 s of CPU); one collection here finalizes the garbage, and what is left is frozen out of theirs.
    gc.collect()
    gc.freeze()
    sys.exit(code)


if __name__ == "__main__":
    run()
