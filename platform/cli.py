"""The ``ndebench`` command line: run, validate, report, ui, server, rates, list, datasets."""
from __future__ import annotations

import argparse
import json
import os
import signal
import sys
from collections.abc import Sequence
from importlib.metadata import version
from pathlib import Path

from ndebench.platform import exitcodes

EPILOG = "Docs: README.md. Every subcommand has --help."
LISTED_CELLS = 12


class Terminated(KeyboardInterrupt):
    """SIGTERM, turned into an exception so that a sweep stops as it does on Ctrl-C."""


def _terminate(signum: int, frame: object) -> None:
    raise Terminated


class CommandError(Exception):
    """A command cannot do what was asked (nothing to report, ...): printed as one line, exit status 2."""


def _add_tracking(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--tracking-uri", help="MLflow tracking URI (default: $MLFLOW_TRACKING_URI, else "
                        "sqlite:///mlflow.db in the working directory); a server with --auth reads "
                        "$MLFLOW_TRACKING_USERNAME and $MLFLOW_TRACKING_PASSWORD")


def _tracking_uri(args: argparse.Namespace) -> str:
    from ndebench.platform.engine.runchecks import check_tracking_uri
    from ndebench.platform.record.tracking import absolute_uri, default_tracking_uri

    uri = absolute_uri(args.tracking_uri) if args.tracking_uri else default_tracking_uri()
    check_tracking_uri(uri)
    return uri


def _describe_spec(spec) -> str:
    from ndebench.platform.spec.plan import plan_stages, sweep_cells

    cells = sweep_cells(spec)
    variants = sum(1 for c in cells if c.variant)
    lines = [f"study {spec.study!r}, protocol {spec.protocol}: {len(cells)} cell(s) = {len(spec.models)} model(s) x "
             f"{len(spec.datasets)} dataset(s) x {len(spec.regularizers)} regularizer(s)"
             + (f" + {variants} fixed-parameter variant cell(s)" if variants else "")]
    for stage in plan_stages(spec):
        tc = stage.tune
        how = {"tpe": f"TPE, {tc.n_startup_trials} random start-up", "random": "random",
               "grid": "full grid"}[tc.sampler]
        how += ", ASHA" if tc.scheduler == "asha" else ""
        searched = [c for c in stage.cells if c.budget]
        if not searched:
            lines.append(f"stage {stage.name}: nothing to search"
                         + (" (model and training fixed)" if stage.name == "base" else ""))
            continue
        lines.append(f"stage {stage.name} ({how}): {stage.trials} trial(s) over {len(searched)} cell(s)")
        for c in searched[:LISTED_CELLS]:
            lines.append(f"  {c.label}: {c.budget} trial(s) [{', '.join(sorted(c.space))}]")
        if len(searched) > LISTED_CELLS:
            lines.append(f"  ... and {len(searched) - LISTED_CELLS} more cell(s)")
    seeds = list(spec.evaluate.seeds)
    lines.append(f"stage evaluate: {len(cells) * len(seeds)} trial(s) = {len(cells)} cell(s) x seeds {seeds}")
    lines.append(f"total: {_total_trials(spec)} trial(s)")
    return "\n".join(lines)


def _total_trials(spec) -> int:
    from ndebench.platform.spec.plan import plan_stages, sweep_cells

    return sum(stage.trials for stage in plan_stages(spec)) + len(sweep_cells(spec)) * len(spec.evaluate.seeds)


def _overrides(args: argparse.Namespace) -> list[str]:
    return [item for group in (args.set or []) for item in group]


def _add_overrides(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--set", action="append", nargs="+", metavar="KEY=VALUE",
                        help="override config values, validated like the YAML (value parsed as YAML), e.g. "
                             "--set training.epochs=2 tune.num_samples=2 'regularizers.continuum_dropout.p=[0.1, 0.3]'")


def cmd_validate(args: argparse.Namespace) -> int:
    from ndebench.platform.engine.runchecks import resource_warnings, size_warnings
    from ndebench.platform.spec.buildcheck import check_models_build, tpe_warnings
    from ndebench.platform.spec.config import load_spec

    spec = load_spec(args.config, _overrides(args))
    built = check_models_build(spec)
    print(f"{args.config}: valid ({built} model configuration(s) built)")
    for warning in tpe_warnings(spec) + resource_warnings(spec) + size_warnings(_total_trials(spec)):
        print(f"warning: {warning}")
    print(_describe_spec(spec))
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    from ndebench.platform.diskfull import DiskFullError
    from ndebench.platform.engine.runchecks import check_out_dir, size_warnings
    from ndebench.platform.engine.sweep import Sweep
    from ndebench.platform.record.completeness import not_ok_summary, planned_statuses
    from ndebench.platform.spec.buildcheck import check_models_build, tpe_warnings
    from ndebench.platform.spec.config import load_spec
    from ndebench.platform.spec.plan import sweep_cells

    spec = load_spec(args.config, _overrides(args))
    check_models_build(spec)
    uri = _tracking_uri(args)
    check_out_dir(args.out)
    print(_describe_spec(spec), flush=True)
    for warning in tpe_warnings(spec) + size_warnings(_total_trials(spec)):
        print(f"warning: {warning}", flush=True)
    sweep = Sweep(spec, tracking_uri=uri, storage_path=args.storage_path, address=args.address,
                  resume=args.resume, data_dir=args.data_dir, verbose=args.verbose,
                  retry_diverged=args.retry_diverged, single_node=args.single_node)
    previous = signal.signal(signal.SIGTERM, _terminate)
    try:
        outcome = sweep.run()
    except KeyboardInterrupt as exc:
        code = exitcodes.TERMINATED if isinstance(exc, Terminated) else exitcodes.INTERRUPTED
        print(f"[ndebench] exit {code}: interrupted ({'SIGTERM' if code == exitcodes.TERMINATED else 'Ctrl-C'}); "
              "`ndebench run ... --resume` continues the study, cut-off evaluate trials from their checkpoints",
              flush=True)
        return code
    except DiskFullError as exc:
        try:
            _report_if_possible(spec, uri, Path(args.out), {})
        except Exception as report_exc:  # noqa: BLE001 - the full disk is what the exit code reports
            print(f"[ndebench] no report: {report_exc}", flush=True)
        print(f"[ndebench] exit {exitcodes.INFRASTRUCTURE}: {exc}", flush=True)
        return exitcodes.INFRASTRUCTURE
    finally:
        signal.signal(signal.SIGTERM, previous)
    print(f"[ndebench] sweep done: {outcome.evaluated} evaluate trial(s) run, {outcome.skipped} reused, "
          f"{len(outcome.failed)} failed cell(s); Ray's full output: {outcome.log_file}", flush=True)
    full = [m for m in (outcome.infrastructure, _report_if_possible(spec, uri, Path(args.out), outcome.failed)) if m]
    if outcome.failed:
        print(f"\n{len(outcome.failed)} cell(s) failed (fix and rerun with --resume to retry only them):")
        for label, message in outcome.failed.items():
            print(f"  {label}: {message}")
    print(f"\nOpen the MLflow UI with:  ndebench ui --tracking-uri {uri}")
    if full:
        print(f"[ndebench] exit {exitcodes.INFRASTRUCTURE}: {'; '.join(full)}", flush=True)
        return exitcodes.INFRASTRUCTURE
    statuses = planned_statuses(uri, spec.study, [c.key for c in sweep_cells(spec)], list(spec.evaluate.seeds))
    problems = [f"{len(outcome.failed)} failed cell(s)"] if outcome.failed else []
    problems += [summary] if (summary := not_ok_summary(statuses)) else []
    if problems:
        print(f"[ndebench] exit {exitcodes.FAILED}: {'; '.join(problems)} (`ndebench run ... --resume` reruns them)",
              flush=True)
        return exitcodes.FAILED
    print(f"[ndebench] all {len(statuses)} planned evaluate run(s) ok or diverged", flush=True)
    return exitcodes.OK


def _report_if_possible(spec, uri: str, out: Path, failed: dict[str, str]) -> str | None:
    """The sweep's report; when a full disk stops it, what is full (the files written so far stay)."""
    from ndebench.platform.diskfull import disk_full, is_disk_full

    try:
        _report(spec.study, uri, out, spec.report.test, spec.report.alpha, spec.report.correction, failed)
    except Exception as exc:  # noqa: BLE001 - only a full disk is handled here; anything else propagates
        if not is_disk_full(exc):
            raise
        message = str(disk_full(exc, str(out.resolve())))
        print(f"[ndebench] report not complete: {message}", flush=True)
        return message
    return None


def _report(study: str, uri: str, out: Path, test: str, alpha: float, correction: str = "none",
            failed: dict[str, str] | None = None) -> None:
    from ndebench.platform.record.runframe import runs_frame
    from ndebench.platform.record.tracking import (
        client,
        evaluate_runs,
        log_report_artifacts,
        planned_seeds,
        study_names,
    )
    from ndebench.platform.report.analyses import label_variants, write_analyses
    from ndebench.platform.report.learning import read_curves
    from ndebench.platform.report.report import build_report, format_console_table, has_results

    studies = study_names(uri)
    if study not in studies:
        raise CommandError(f"study {study!r} is not in {uri}; studies there: {', '.join(studies) or 'none'}")
    runs = evaluate_runs(uri, study, variants=True)
    if runs.empty and failed:
        print(f"no evaluate run of study {study!r} finished, so no report was written", flush=True)
        return
    if runs.empty:
        raise CommandError(f"study {study!r} has no evaluate-phase runs in {uri}; run the sweep first")
    frame = runs_frame(uri, study)
    runs = label_variants(runs, frame)
    ok = runs.loc[runs["status"] == "ok", "run_id"]
    files = build_report(runs, out, study, test=test, alpha=alpha, correction=correction,
                         planned_seeds=planned_seeds(uri, study), curves=read_curves(client(uri), list(ok)))
    print(format_console_table(runs, test=test, alpha=alpha, correction=correction))
    if failed:
        lines = ["", "## Failed cells", "", "| cell | first error |", "|---|---|"]
        lines += [f"| {label} | {message.replace('|', '/')} |" for label, message in failed.items()]
        with files.table_md.open("a") as handle:
            handle.write("\n".join(lines) + "\n")
    paths = list(files.paths)
    if has_results(runs):
        experiment = client(uri).get_experiment_by_name(study)
        paths += write_analyses(
            frame, runs, files, study, test=test, alpha=alpha, correction=correction,
            reevaluated=runs_frame(uri, study, "reevaluate", histories=False), ui_url="http://127.0.0.1:5000",
            experiment_id=experiment.experiment_id if experiment else None)
    log_report_artifacts(uri, study, paths)
    print(f"\nreport written to {out.resolve() / study} ({', '.join(p.name for p in paths)}) "
          f"and logged to the study's MLflow run")


def cmd_report(args: argparse.Namespace) -> int:
    from ndebench.platform.report.stats import check_alpha
    from ndebench.platform.spec.config import check_study_name

    check_study_name(args.study)
    check_alpha(args.alpha)
    _report(args.study, _tracking_uri(args), Path(args.out), args.test, args.alpha, args.correction)
    return 0


def cmd_reevaluate(args: argparse.Namespace) -> int:
    from ndebench.platform.engine.reevaluate import parse_n_mc, reevaluate

    n_mc = parse_n_mc(args.n_mc)
    uri = _tracking_uri(args)
    created = reevaluate(uri, args.study, n_mc, log=lambda line: print(line, flush=True), data_dir=args.data_dir)
    print(f"[ndebench] {len(created)} reevaluate run(s) recorded in study {args.study!r}; "
          f"`ndebench report --study {args.study}` adds the MC-samples table")
    return 0


def cmd_ui(args: argparse.Namespace) -> int:
    import webbrowser

    from ndebench.platform.engine.server import serve, study_url, ui_command
    from ndebench.platform.record.tracking import client

    uri = _tracking_uri(args)
    base = f"http://{args.host}:{args.port}"
    url = base
    if args.study:
        experiment = client(uri).get_experiment_by_name(args.study)
        if experiment is None:
            names = sorted(e.name for e in client(uri).search_experiments())
            raise CommandError(f"no study {args.study!r} in {uri}; studies there: {', '.join(names) or 'none'}")
        url = study_url(base, experiment.experiment_id)
    print(f"MLflow UI for {uri} at {base} (Ctrl-C to stop)", flush=True)
    if args.study:
        print(f"study {args.study!r}, evaluate runs: {url}", flush=True)
    return serve(ui_command(uri, args.host, args.port), base_url=base,
                 on_ready=(lambda: webbrowser.open(url)) if args.open else None)


def cmd_server(args: argparse.Namespace) -> int:
    from ndebench.platform.engine.auth import exposure_warning
    from ndebench.platform.engine.server import default_settings, serve, server_command, server_environment

    backend = _tracking_uri(argparse.Namespace(tracking_uri=args.backend_store_uri)) if args.backend_store_uri else None
    settings = default_settings(
        backend_store_uri=backend, artifacts_destination=args.artifacts_destination, host=args.host,
        port=args.port, public_host=args.public_host, workers=args.workers,
        allowed_hosts=tuple(h for h in (args.allowed_hosts or "").split(",") if h) or None, auth=args.auth,
    )
    env = server_environment(settings, args.credentials_file)
    if warning := exposure_warning(settings.host, settings.auth):
        print(warning, file=sys.stderr, flush=True)
    print(f"MLflow tracking server: runs in {settings.backend_store_uri}, artifacts in "
          f"{settings.artifacts_destination}, listening on {settings.host}:{settings.port}", flush=True)
    print(f"Workers and the driver must use:  --tracking-uri {settings.tracking_uri}", flush=True)
    return serve(server_command(settings), env=env)


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
        _plot_rates(args)
    if args.json:
        print(json.dumps(result))
    else:
        print(f"lambda1 = {rates.lambda1:.10g}   (active periods ~ Exp(lambda1), mean {1 / rates.lambda1:.4g})")
        print(f"lambda2 = {rates.lambda2:.10g}   (inactive periods ~ Exp(lambda2), mean {1 / rates.lambda2:.4g})")
        print(f"check: p = {result['check_p']:.12g}, m = {result['check_m']:.12g}")
        print(f"large-T approximation: lambda1 ~ {approx.lambda1:.6g}, lambda2 ~ {approx.lambda2:.6g}")
    return 0


def _plot_rates(args: argparse.Namespace) -> None:
    from ndebench.platform.report.trajectories import parse_floats, trajectory_figure

    if args.paths < 1:
        raise ValueError(f"--paths {args.paths} must be >= 1")
    ps = parse_floats(args.plot_p, "--plot-p") if args.plot_p else [args.p]
    ms = parse_floats(args.plot_m, "--plot-m") if args.plot_m else [args.m]
    written = trajectory_figure([(p, m) for p in ps for m in ms], Path(args.plot), args.T, n_paths=args.paths,
                                seed=args.seed)
    print(f"sample paths written to {', '.join(map(str, written))}", file=sys.stderr if args.json else sys.stdout)


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


def cmd_datasets(args: argparse.Namespace) -> int:
    from ndebench.datasets.check import check_dataset, dataset_status, dataset_statuses

    if args.action == "list":
        statuses = dataset_statuses(args.data_dir)
        print(f"data directory: {statuses[0]['data_dir']}")
        for status in statuses:
            where = status["source"] if status["available"] else "missing"
            print(f"{status['name']:40s} {'yes' if status['available'] else 'no ':3s}  {status['shape']:45s} {where}")
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


def _port(text: str) -> int:
    if not (text.isdigit() and 1 <= int(text) <= 65535):
        raise argparse.ArgumentTypeError(f"{text!r} is not a TCP port (1-65535)")
    return int(text)


def _int_list(text: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None
    if not values or any(v < 1 for v in values):
        raise argparse.ArgumentTypeError(f"expected comma-separated integers >= 1, got {text!r}")
    return values


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text!r}")
    return value


def cmd_bench(args: argparse.Namespace) -> int:
    import torch
    from ndebench.platform import bench

    if args.threads:
        torch.set_num_threads(args.threads)
    say = (lambda message: print(message, file=sys.stderr, flush=True)) if args.json else print
    if args.target == "platform":
        result = bench.bench_platform(trials=args.trials, epochs=args.epochs, reuse_actors=args.reuse_actors,
                                      say=say)
        if args.json:
            print(json.dumps(result))
        else:
            for key, value in result.items():
                print(f"{key:24s} {value}")
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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ndebench",
        description="Benchmark regularizers of Neural Differential Equations: Ray Tune + Optuna sweeps, "
                    "MLflow tracking, five-seed t-test tables.",
        epilog=EPILOG,
    )
    parser.add_argument("--version", action="version", version=f"ndebench {version('ndebench')}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    run = sub.add_parser("run", help="run a sweep (search stages, then evaluate) and write its report",
                         description="Validate CONFIG, start or join a Ray cluster, run the protocol's search stages "
                                     "(paper: base, then regularizer; joint: one tune stage), each over all cells in "
                                     "one Ray Tune run with an Optuna study per cell, evaluate every cell's chosen "
                                     "config over the seeds on test data, record every trial in MLflow and write the "
                                     "report. Exit 1 when a cell failed (the others still finish) or a planned "
                                     "evaluate run is not ok, 2 on bad input (before Ray starts), 3 when a disk is "
                                     "full, 130 on Ctrl-C.")
    run.add_argument("config", help="sweep YAML, e.g. tune_configs/quickstart.yaml")
    _add_overrides(run)
    _add_tracking(run)
    run.add_argument("--storage-path", default="ray_results",
                     help="Ray Tune storage: a folder (default: ./ray_results) "
                     "or a pyarrow filesystem URI (file://, s3://, gs://); shared storage on a multi-node cluster")
    run.add_argument("--address", help="Ray cluster address to join (e.g. 'auto' on a cluster node or HEAD_IP:6379; "
                     "default: $RAY_ADDRESS, which a Ray Job sets; without either, start a local Ray). A joined "
                     "cluster must share the tracking store (no sqlite), storage and data, however many nodes it "
                     "has now")
    run.add_argument("--single-node", action="store_true", help="the joined cluster stays one machine: allow a "
                     "sqlite tracking URI and skip the shared-storage and data checks")
    run.add_argument("--resume", action="store_true", help="continue a study: rerun failed and unfinished cells and "
                     "every planned (cell, seed) without an ok run (errored, cut off, missing, newly added seeds), "
                     "reading finished cells' chosen configs from MLflow")
    run.add_argument("--retry-diverged", action="store_true", help="with --resume, also rerun diverged evaluate runs "
                     "whose config and code are unchanged")
    run.add_argument("--verbose", action="store_true", help="show Ray's own progress tables and worker output "
                     "(always written to a log file under the storage path)")
    run.add_argument("--data-dir", help="data directory (overrides the config's data_dir and $NDEBENCH_DATA_DIR)")
    run.add_argument("--out", default="reports", help="report folder (default: ./reports)")
    run.set_defaults(func=cmd_run)

    validate = sub.add_parser("validate", help="check a sweep config without running anything",
                              description="Parse and validate CONFIG, build every model of the sweep once on a tiny "
                                          "input, and print the stages, cells and trial counts it implies.")
    validate.add_argument("config")
    _add_overrides(validate)
    validate.set_defaults(func=cmd_validate)

    report = sub.add_parser("report", help="tables, figures and t-tests for a study's evaluate runs",
                            description="Read the study's evaluate-phase runs from MLflow and write results.csv, "
                                        "table.md, table.tex, figures (PNG and PDF), the sensitivity, compute-time, "
                                        "extended-summary and MC-samples tables, and a self-contained report.html to "
                                        "OUT/STUDY, also logged to MLflow.")
    report.add_argument("--study", required=True)
    _add_tracking(report)
    report.add_argument("--out", default="reports", help="report folder (default: ./reports)")
    report.add_argument("--test", default="student", choices=["student", "welch", "paired"],
                        help="t-test against 'none'")
    report.add_argument("--alpha", type=float, default=0.05, help="significance level for the markers (default 0.05)")
    report.add_argument("--correction", default="none", choices=["none", "holm", "bh"],
                        help="multiple-testing correction of the p-values behind the markers, over each table's "
                             "comparisons: none (the paper), holm (family-wise), bh (false-discovery rate)")
    report.set_defaults(func=cmd_report)

    reevaluate = sub.add_parser(
        "reevaluate", help="re-score trained evaluate runs with several numbers of test-time MC passes",
        description="Load the weights logged by each ok evaluate run of STUDY whose regularizer is on at test "
                    "time (Continuum Dropout, jump diffusion + TTN), evaluate on the test split with each N_MC "
                    "and record runs tagged ndebench.phase=reevaluate (no retraining; finished pairs are skipped).")
    reevaluate.add_argument("--study", required=True)
    reevaluate.add_argument("--n-mc", default="1,3,5,10,20", help="comma-separated MC passes (default 1,3,5,10,20)")
    reevaluate.add_argument("--data-dir", help="data directory (default: $NDEBENCH_DATA_DIR, else ./data); a run's "
                            "own data_dir param is never used")
    _add_tracking(reevaluate)
    reevaluate.set_defaults(func=cmd_reevaluate)

    ui = sub.add_parser("ui", help="serve the MLflow UI for the tracking database",
                        description="Serve the MLflow UI on localhost for the tracking URI.")
    _add_tracking(ui)
    ui.add_argument("--port", type=_port, default=5000, help="TCP port, 1-65535 (default 5000)")
    ui.add_argument("--host", default="127.0.0.1")
    ui.add_argument("--study", help="print the URL of this study's evaluate runs in the model-training view")
    ui.add_argument("--open", action="store_true", help="open that URL (or the UI) in a web browser once it is up")
    ui.set_defaults(func=cmd_ui)

    server = sub.add_parser(
        "server", help="start the MLflow tracking server that a multi-node sweep needs",
        description="Start an MLflow tracking server on the head node (runs in a sqlite file there by default, "
                    "artifacts proxied through the server) and print the --tracking-uri that `ndebench run` must "
                    "use on a cluster. Stops with Ctrl-C or SIGTERM, its workers too.")
    server.add_argument("--backend-store-uri", help="where runs are stored (default: sqlite:///mlflow.db in the "
                        "working directory; a postgresql:// or mysql:// URI for a database server)")
    server.add_argument("--artifacts-destination", help="folder or object-store URI (s3://, gs://) for artifacts "
                        "(default: ./mlartifacts on this node; workers upload through the server)")
    server.add_argument("--host", default="127.0.0.1", help="interface to bind (default 127.0.0.1: this machine "
                        "only). 0.0.0.0 makes it reachable from the other nodes, and from anyone else who reaches the "
                        "port: without authentication it is a read/write API with artifact upload (README, Cluster)")
    server.add_argument("--port", type=_port, default=5000, help="TCP port, 1-65535 (default 5000)")
    server.add_argument("--public-host", help="name or address the workers reach this node by (default: this "
                        "machine's fully qualified host name)")
    server.add_argument("--allowed-hosts", help="comma-separated Host headers to accept besides localhost and "
                        "private IPs (default: the public host, with and without the port)")
    server.add_argument("--workers", type=int, default=4, help="server worker processes (default 4)")
    server.add_argument("--auth", action="store_true", help="run MLflow's basic-auth app: every request needs a "
                        "user and password. The admin account comes from $MLFLOW_TRACKING_USERNAME and "
                        "$MLFLOW_TRACKING_PASSWORD (or --credentials-file), never from the command line; sweeps "
                        "and `ndebench report` send the same variables (needs the `cluster` extra)")
    server.add_argument("--credentials-file", help="with --auth: a file of 'username = NAME' and 'password = "
                        "SECRET' lines for the admin account, instead of the environment variables")
    server.set_defaults(func=cmd_server)

    rates = sub.add_parser("rates", help="Continuum Dropout rates (lambda1, lambda2) from (p, m, T)",
                           description="Solve the paper's Corollary 3.2 exactly for the renewal rates.")
    rates.add_argument("--p", type=float, required=True, help="dropout rate, in [1e-6, 1 - 1e-6]")
    rates.add_argument("--m", type=float, required=True, help="expected number of renewals on [0, T], in [1e-6, 1e6]")
    rates.add_argument("--T", type=float, default=1.0, help="time horizon (default 1)")
    rates.add_argument("--json", action="store_true", help="print JSON")
    rates.add_argument("--plot", metavar="FILE", help="also draw sample paths of I(t) and of a paused latent "
                       "component (the paper's Figs. 2 and 10) to FILE (.png, with a PDF beside it, or .pdf)")
    rates.add_argument("--plot-p", metavar="P1,P2", help="with --plot: several p, one column each (default: --p)")
    rates.add_argument("--plot-m", metavar="M1,M2", help="with --plot: several m, one column each (default: --m)")
    rates.add_argument("--paths", type=int, default=3, help="with --plot: sample paths per (p, m) (default 3)")
    rates.add_argument("--seed", type=int, default=0, help="with --plot: random seed (default 0)")
    rates.set_defaults(func=cmd_rates)

    datasets = sub.add_parser("datasets", help="which datasets are available locally; validate a dataset's files",
                              description="'list': every dataset, whether its files are present, its shape. "
                                          "'check NAME': load NAME and report wrong counts, shapes or labels.")
    datasets.add_argument("action", choices=["list", "check"])
    datasets.add_argument("name", nargs="?", help="dataset to check (with 'check')")
    datasets.add_argument("--data-dir", help="data directory (default: $NDEBENCH_DATA_DIR, else ./data)")
    datasets.set_defaults(func=cmd_datasets)

    bench = sub.add_parser(
        "bench", help="what Continuum Dropout and the platform cost: train step, MC evaluation, mask draw, per trial",
        description="Time, on random data, one training step (forward + backward) without and with Continuum "
                    "Dropout, N-pass MC evaluation against one deterministic pass, and the mask draw, for every "
                    "(model, hidden, batch) combination; medians over --reps rounds that interleave the variants. "
                    "'bench draw' times the mask draw alone (default: the paper's Speech Commands scale); "
                    "'bench platform' measures the per-trial cost of Ray scheduling and MLflow logging against "
                    "run_trial called directly, and the throughput of 2 concurrent 1-CPU trials against one.",
    )
    bench.add_argument("target", nargs="?", default="models", choices=["models", "draw", "platform"],
                       help="what to time (default: models)")
    bench.add_argument("--models", default="neural_cde",
                       help="comma-separated time-series models (default: neural_cde)")
    bench.add_argument("--hidden", type=_int_list, help="comma-separated latent sizes (default: 16,128; draw: 512)")
    bench.add_argument("--batch", type=_int_list, help="comma-separated batch sizes (default: 64,128; draw: 256)")
    bench.add_argument("--length", type=_positive_int, help="points per series (default: 100; draw: 161 grid points)")
    bench.add_argument("--horizon", type=float, help="draw: time horizon T of the grid (default: points - 1)")
    bench.add_argument("--solver", default="euler",
                       help="solver method (default: euler; the model's adjoint setting is kept)")
    bench.add_argument("--n-mc", type=_positive_int, default=5, help="Monte-Carlo passes at evaluation (default: 5)")
    bench.add_argument("--p", type=float, default=0.3, help="Continuum Dropout rate (default: 0.3)")
    bench.add_argument("--m", type=float, help="expected renewals (default: 10; draw: 100)")
    bench.add_argument("--device", default="cpu", help="cpu or cuda (default: cpu)")
    bench.add_argument("--threads", type=_positive_int, help="torch CPU threads (default: torch's own)")
    bench.add_argument("--reps", type=_positive_int, default=15,
                       help="timed rounds after one warm-up round (default: 15)")
    bench.add_argument("--trials", type=_positive_int, default=12,
                       help="platform: trials per measurement, at least 4 (default: 12)")
    bench.add_argument("--epochs", type=_positive_int, default=2,
                       help="platform: epochs of the tiny trial (default: 2)")
    bench.add_argument("--reuse-actors", action="store_true",
                       help="platform: let Tune keep worker processes between trials (TuneConfig(reuse_actors=True))")
    bench.add_argument("--json", action="store_true", help="print JSON (progress goes to stderr)")
    bench.set_defaults(func=cmd_bench)

    lister = sub.add_parser("list", help="list registered models, regularizers or datasets")
    lister.add_argument("what", choices=["models", "regularizers", "datasets"])
    lister.set_defaults(func=cmd_list)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``ndebench`` console script."""
    parser = build_parser()
    args = parser.parse_args(argv)
    # After parsing, so that --help and --version answer without importing torch (config imports the models).
    from ndebench.platform.diskfull import disk_full, is_disk_full
    from ndebench.platform.record.tracking import default_tracking_uri, sqlite_path
    from ndebench.platform.registry import UnknownNameError
    from ndebench.platform.spec.config import ConfigError

    if args.command == "datasets" and args.action == "check" and not args.name:
        parser.error("datasets check needs a dataset NAME (see `ndebench datasets list`)")
    try:
        return args.func(args)
    except Exception as exc:
        if is_disk_full(exc):
            database = sqlite_path(getattr(args, "tracking_uri", None) or default_tracking_uri())
            error = disk_full(exc, os.getcwd(), str(database) if database else None)
            print(f"ndebench {args.command}: error: {error}", file=sys.stderr)
            return exitcodes.INFRASTRUCTURE
        if not isinstance(exc, (ConfigError, UnknownNameError, CommandError, ValueError, OSError, RuntimeError)):
            raise
        print(f"ndebench {args.command}: error: {exc}", file=sys.stderr)
        return exitcodes.BAD_INPUT


def run() -> None:
    """Console-script entry: ``main`` with Unix pipe behaviour (``ndebench list models | head`` ends quietly)."""
    if hasattr(signal, "SIGPIPE"):
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    sys.exit(main())


if __name__ == "__main__":
    run()
