"""The ``ndebench`` command line: run, validate, report, ui, server, rates, list, datasets."""
from __future__ import annotations

import argparse
import json
import os
import signal
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
    _report(spec.study, uri, Path(args.out), spec.report.test, spec.report.alpha)
    print(f"\nOpen the MLflow UI with:  ndebench ui --tracking-uri {uri}")
    return 1 if outcome.errors else 0


def _report(study: str, uri: str, out: Path, test: str, alpha: float) -> None:
    from ndebench.platform.report import build_report, format_console_table
    from ndebench.platform.tracking import evaluate_runs, log_report_artifacts

    runs = evaluate_runs(uri, study)
    if runs.empty:
        raise SystemExit(f"study {study!r} has no evaluate-phase runs in {uri}; run the sweep first")
    files = build_report(runs, out, study, test=test, alpha=alpha)
    print(format_console_table(runs, test=test, alpha=alpha))
    paths = list(files.paths)
    log_report_artifacts(uri, study, paths)
    print(f"\nreport written to {out.resolve() / study} ({', '.join(p.name for p in paths)}) "
          f"and logged to MLflow run 'report-{study}'")


def cmd_report(args: argparse.Namespace) -> int:
    _report(args.study, _tracking_uri(args), Path(args.out), args.test, args.alpha)
    return 0


def cmd_ui(args: argparse.Namespace) -> int:
    import webbrowser

    from ndebench.platform.server import serve, study_url, ui_command
    from ndebench.platform.tracking import client

    uri = _tracking_uri(args)
    base = f"http://{args.host}:{args.port}"
    url = base
    if args.study:
        experiment = client(uri).get_experiment_by_name(args.study)
        if experiment is None:
            names = sorted(e.name for e in client(uri).search_experiments())
            raise ValueError(f"no study {args.study!r} in {uri}; studies there: {', '.join(names) or 'none'}")
        url = study_url(base, experiment.experiment_id)
    print(f"MLflow UI for {uri} at {base} (Ctrl-C to stop)", flush=True)
    if args.study:
        print(f"study {args.study!r}, evaluate runs: {url}", flush=True)
    return serve(ui_command(uri, args.host, args.port), base_url=base,
                 on_ready=(lambda: webbrowser.open(url)) if args.open else None)


def cmd_server(args: argparse.Namespace) -> int:
    from ndebench.platform.server import default_settings, serve, server_command

    backend = _tracking_uri(argparse.Namespace(tracking_uri=args.backend_store_uri)) if args.backend_store_uri else None
    settings = default_settings(
        backend_store_uri=backend, artifacts_destination=args.artifacts_destination, host=args.host,
        port=args.port, public_host=args.public_host, workers=args.workers,
        allowed_hosts=tuple(h for h in (args.allowed_hosts or "").split(",") if h) or None,
    )
    print(f"MLflow tracking server: runs in {settings.backend_store_uri}, artifacts in "
          f"{settings.artifacts_destination}, listening on {settings.host}:{settings.port}", flush=True)
    print(f"Workers and the driver must use:  --tracking-uri {settings.tracking_uri}", flush=True)
    return serve(server_command(settings))


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
    if args.json:
        print(json.dumps(result))
    else:
        print(f"lambda1 = {rates.lambda1:.10g}   (active periods ~ Exp(lambda1), mean {1 / rates.lambda1:.4g})")
        print(f"lambda2 = {rates.lambda2:.10g}   (inactive periods ~ Exp(lambda2), mean {1 / rates.lambda2:.4g})")
        print(f"check: p = {result['check_p']:.12g}, m = {result['check_m']:.12g}")
        print(f"large-T approximation: lambda1 ~ {approx.lambda1:.6g}, lambda2 ~ {approx.lambda2:.6g}")
    return 0


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
    run.add_argument("--address", help="Ray cluster address to join (e.g. 'auto' on a cluster node or HEAD_IP:6379); default: start a local Ray")
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
                                        "table.md, table.tex and figures to OUT/STUDY, also logged to MLflow.")
    report.add_argument("--study", required=True)
    _add_tracking(report)
    report.add_argument("--out", default="reports", help="report folder (default: ./reports)")
    report.add_argument("--test", default="student", choices=["student", "welch", "paired"], help="t-test against 'none'")
    report.add_argument("--alpha", type=float, default=0.05, help="significance level for the markers (default 0.05)")
    report.set_defaults(func=cmd_report)

    ui = sub.add_parser("ui", help="serve the MLflow UI for the tracking database",
                        description="Serve the MLflow UI on localhost for the tracking URI.")
    _add_tracking(ui)
    ui.add_argument("--port", type=int, default=5000)
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
    server.add_argument("--host", default="0.0.0.0", help="interface to bind (default 0.0.0.0: reachable from the "
                        "other nodes; 127.0.0.1 for this machine only)")
    server.add_argument("--port", type=int, default=5000)
    server.add_argument("--public-host", help="name or address the workers reach this node by (default: this "
                        "machine's fully qualified host name)")
    server.add_argument("--allowed-hosts", help="comma-separated Host headers to accept besides localhost and "
                        "private IPs (default: the public host, with and without the port)")
    server.add_argument("--workers", type=int, default=4, help="server worker processes (default 4)")
    server.set_defaults(func=cmd_server)

    rates = sub.add_parser("rates", help="Continuum Dropout rates (lambda1, lambda2) from (p, m, T)",
                           description="Solve the paper's Corollary 3.2 exactly for the renewal rates.")
    rates.add_argument("--p", type=float, required=True, help="dropout rate, in (0, 1)")
    rates.add_argument("--m", type=float, required=True, help="expected number of renewals on [0, T], > 0")
    rates.add_argument("--T", type=float, default=1.0, help="time horizon (default 1)")
    rates.add_argument("--json", action="store_true", help="print JSON")
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
