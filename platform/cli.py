"""The ``ndebench`` command line: run, validate, report, ui, rates, list, datasets."""
from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path
from typing import Sequence

EPILOG = "Docs: README.md. Every subcommand has --help."


def _add_tracking(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--tracking-uri", help="MLflow tracking URI (default: sqlite:///mlflow.db in the working directory)")


def _tracking_uri(args: argparse.Namespace) -> str:
    from ndebench.platform.tracking import absolute_uri, default_tracking_uri

    return absolute_uri(args.tracking_uri) if args.tracking_uri else default_tracking_uri()


def _describe_spec(spec) -> str:
    from ndebench.platform.config import searched_keys

    lines = [f"study {spec.study!r}: {len(spec.cells())} cell(s) = {len(spec.models)} model(s) x "
             f"{len(spec.datasets)} dataset(s) x {len(spec.regularizers)} regularizer(s)"]
    total = 0
    for cell in spec.cells():
        keys = searched_keys(spec.base_config(*cell))
        tune_trials = spec.tune.num_samples if keys else 0
        total += tune_trials + len(spec.evaluate.seeds)
        searched = ", ".join(keys) if keys else "nothing searched"
        lines.append(f"  {cell[0]} x {cell[1]} x {cell[2]}: tune {tune_trials} trial(s) [{searched}], "
                     f"evaluate seeds {list(spec.evaluate.seeds)}")
    lines.append(f"total: {total} trial(s)")
    return "\n".join(lines)


def cmd_validate(args: argparse.Namespace) -> int:
    from ndebench.platform.config import load_spec

    spec = load_spec(args.config)
    print(f"{args.config}: valid")
    print(_describe_spec(spec))
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    from ndebench.platform.config import load_spec
    from ndebench.platform.sweep import Sweep

    spec = load_spec(args.config)
    uri = _tracking_uri(args)
    print(_describe_spec(spec), flush=True)
    sweep = Sweep(spec, tracking_uri=uri, storage_path=args.storage_path, address=args.address,
                  resume=args.resume, data_dir=args.data_dir)
    outcome = sweep.run()
    print(f"[ndebench] sweep done: {outcome.evaluated} evaluate trial(s) run, {outcome.skipped} reused, "
          f"{outcome.errors} error(s)", flush=True)
    _report(spec.study, uri, Path(args.out), spec.report.test, spec.report.alpha, spec.report.correction)
    print(f"\nOpen the MLflow UI with:  ndebench ui --tracking-uri {uri}")
    return 1 if outcome.errors else 0


def _report(study: str, uri: str, out: Path, test: str, alpha: float, correction: str = "none") -> None:
    from ndebench.platform.analyses import label_variants, write_analyses
    from ndebench.platform.report import build_report, format_console_table
    from ndebench.platform.runframe import runs_frame
    from ndebench.platform.tracking import client, evaluate_runs, log_report_artifacts

    runs = evaluate_runs(uri, study)
    if runs.empty:
        raise SystemExit(f"study {study!r} has no evaluate-phase runs in {uri}; run the sweep first")
    frame = runs_frame(uri, study)
    runs = label_variants(runs, frame)
    files = build_report(runs, out, study, test=test, alpha=alpha, correction=correction)
    print(format_console_table(runs, test=test, alpha=alpha, correction=correction))
    experiment = client(uri).get_experiment_by_name(study)
    paths = list(files.paths) + write_analyses(
        frame, runs, files, study, test=test, alpha=alpha, correction=correction,
        reevaluated=runs_frame(uri, study, "reevaluate", histories=False), ui_url="http://127.0.0.1:5000",
        experiment_id=experiment.experiment_id if experiment else None)
    log_report_artifacts(uri, study, paths)
    print(f"\nreport written to {out.resolve() / study} ({', '.join(p.name for p in paths)}) "
          f"and logged to MLflow run 'report-{study}'")


def cmd_report(args: argparse.Namespace) -> int:
    _report(args.study, _tracking_uri(args), Path(args.out), args.test, args.alpha, args.correction)
    return 0


def cmd_reevaluate(args: argparse.Namespace) -> int:
    from ndebench.platform.reevaluate import parse_n_mc, reevaluate

    n_mc = parse_n_mc(args.n_mc)
    uri = _tracking_uri(args)
    created = reevaluate(uri, args.study, n_mc, log=lambda line: print(line, flush=True))
    print(f"[ndebench] {len(created)} reevaluate run(s) recorded in study {args.study!r}; "
          f"`ndebench report --study {args.study}` adds the MC-samples table")
    return 0


def cmd_ui(args: argparse.Namespace) -> int:
    uri = _tracking_uri(args)
    env = dict(os.environ, MLFLOW_SERVER_ENABLE_JOB_EXECUTION="false")
    command = [sys.executable, "-m", "mlflow", "ui", "--backend-store-uri", uri, "--host", args.host,
               "--port", str(args.port), "--workers", "1"]
    print(f"MLflow UI for {uri} at http://{args.host}:{args.port} (Ctrl-C to stop)", flush=True)
    return subprocess.call(command, env=env)


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
    from ndebench.platform.trajectories import parse_floats, trajectory_figure

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
            print(f"{name:28s} [{info.input_kind}] {info.summary}\n{'':28s} {info.paper}")
    elif args.what == "regularizers":
        from ndebench.regularizers.registry import list_regularizers, regularizer_info

        for name in list_regularizers():
            info = regularizer_info(name)
            space = ", ".join(f"{k} = {hp.choices[0]}" if len(hp.choices) == 1 else f"{k} in {list(hp.choices)}"
                              for k, hp in info.hyperparams.items())
            print(f"{name:22s} {info.summary}" + (f"\n{'':22s} default search: {space}" if space else ""))
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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ndebench",
        description="Benchmark regularizers of Neural Differential Equations: Ray Tune + Optuna sweeps, "
                    "MLflow tracking, five-seed t-test tables.",
        epilog=EPILOG,
    )
    parser.add_argument("--version", action="version", version=f"ndebench {version('ndebench')}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    run = sub.add_parser("run", help="run a sweep (tune phase, then evaluate phase) and write its report",
                         description="Validate CONFIG, start or join a Ray cluster, tune each cell with Optuna on "
                                     "validation data, evaluate the best configs over the seeds on test data, record "
                                     "every trial in MLflow and write the report.")
    run.add_argument("config", help="sweep YAML, e.g. tune_configs/quickstart.yaml")
    _add_tracking(run)
    run.add_argument("--storage-path", default="ray_results", help="Ray Tune storage folder (default: ./ray_results; "
                     "shared storage such as NFS or s3:// on a multi-node cluster)")
    run.add_argument("--address", help="Ray cluster address to join (e.g. 'auto' or ray://head:10001); default: start a local Ray")
    run.add_argument("--resume", action="store_true", help="continue a study: reuse finished tune phases and evaluate runs")
    run.add_argument("--data-dir", help="data directory (overrides the config's data_dir and $NDEBENCH_DATA_DIR)")
    run.add_argument("--out", default="reports", help="report folder (default: ./reports)")
    run.set_defaults(func=cmd_run)

    validate = sub.add_parser("validate", help="check a sweep config without running anything",
                              description="Parse and validate CONFIG and print the cells and trial counts it implies.")
    validate.add_argument("config")
    validate.set_defaults(func=cmd_validate)

    report = sub.add_parser("report", help="tables, figures and t-tests for a study's evaluate runs",
                            description="Read the study's evaluate-phase runs from MLflow and write results.csv, "
                                        "table.md, table.tex, figures (PNG and PDF), the sensitivity, compute-time, "
                                        "extended-summary and MC-samples tables, and a self-contained report.html to "
                                        "OUT/STUDY, also logged to MLflow.")
    report.add_argument("--study", required=True)
    _add_tracking(report)
    report.add_argument("--out", default="reports", help="report folder (default: ./reports)")
    report.add_argument("--test", default="student", choices=["student", "welch", "paired"], help="t-test against 'none'")
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
    _add_tracking(reevaluate)
    reevaluate.set_defaults(func=cmd_reevaluate)

    ui = sub.add_parser("ui", help="serve the MLflow UI for the tracking database",
                        description="Serve the MLflow UI on localhost for the tracking URI.")
    _add_tracking(ui)
    ui.add_argument("--port", type=int, default=5000)
    ui.add_argument("--host", default="127.0.0.1")
    ui.set_defaults(func=cmd_ui)

    rates = sub.add_parser("rates", help="Continuum Dropout rates (lambda1, lambda2) from (p, m, T)",
                           description="Solve the paper's Corollary 3.2 exactly for the renewal rates.")
    rates.add_argument("--p", type=float, required=True, help="dropout rate, in (0, 1)")
    rates.add_argument("--m", type=float, required=True, help="expected number of renewals on [0, T], > 0")
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

    lister = sub.add_parser("list", help="list registered models, regularizers or datasets")
    lister.add_argument("what", choices=["models", "regularizers", "datasets"])
    lister.set_defaults(func=cmd_list)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``ndebench`` console script."""
    from ndebench.platform.config import ConfigError
    from ndebench.platform.registry import UnknownNameError

    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "datasets" and args.action == "check" and not args.name:
        parser.error("datasets check needs a dataset NAME (see `ndebench datasets list`)")
    try:
        return args.func(args)
    except (ConfigError, UnknownNameError, ValueError, FileNotFoundError, RuntimeError) as exc:
        print(f"ndebench {args.command}: error: {exc}", file=sys.stderr)
        return 2


def run() -> None:
    """Console-script entry: ``main`` with Unix pipe behaviour (``ndebench list models | head`` ends quietly)."""
    if hasattr(signal, "SIGPIPE"):
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    sys.exit(main())


if __name__ == "__main__":
    run()
