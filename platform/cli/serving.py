"""The commands that serve the tracking store (``ui``, ``server``, ``grant``) and the tracking URI a command uses."""
from __future__ import annotations

import argparse
import sys

# A local viewer's console keeps to its links: MLflow's INFO lines (schema set-up, uvicorn's start-up and access
# lines) and the deprecation warning its own WSGI bridge raises in Starlette stay out; warnings and errors show.
UI_QUIET = {"MLFLOW_LOGGING_LEVEL": "WARNING", "PYTHONWARNINGS": "ignore:starlette.middleware.wsgi is deprecated"}


def tracking_uri(args: argparse.Namespace) -> str:
    """The command's ``--tracking-uri`` made absolute (or the default ``sqlite:///mlflow.db``), checked."""
    from ndebench.platform.engine.runchecks import check_tracking_uri
    from ndebench.platform.record.store import absolute_uri, default_tracking_uri

    uri = absolute_uri(args.tracking_uri) if args.tracking_uri else default_tracking_uri()
    check_tracking_uri(uri)
    return uri


def studies_hint(names: list[str]) -> str:
    """The line ``ndebench ui`` prints without ``--study``: the studies of the store and how to open one."""
    if not names:
        return "no studies yet (`ndebench run CONFIG` makes one); then `ndebench ui --study NAME` opens its results"
    count = f"{len(names)} studies" if len(names) > 1 else "1 study"
    return f"{count}: {', '.join(names)}; `ndebench ui --study NAME` opens one's results"


def cmd_ui(args: argparse.Namespace) -> int:
    import webbrowser

    from ndebench.platform import api
    from ndebench.platform.record.uiview import studies_url
    from ndebench.platform.server.auth import check_exposure
    from ndebench.platform.server.launch import basic_auth_environment, serve, ui_command

    warning = check_exposure("ui", args.host, args.auth, args.insecure)
    uri = tracking_uri(args)
    env = basic_auth_environment(args.credentials_file, cache_ttl_s=args.auth_cache_ttl) if args.auth else {}
    env |= UI_QUIET
    base = f"http://{args.host}:{args.port}"
    if args.study:
        links = api.study_links(args.study, uri, base)
        url = links.runs
    else:
        url = studies_url(base)
        names = api.studies(uri)["study"].tolist()
    if warning:
        print(warning, file=sys.stderr, flush=True)
    print(f"MLflow UI for {uri} starting at {base} (Ctrl-C to stop); its links follow once it answers", flush=True)

    def ready() -> None:
        # Printed once the server answers /health: a link opened before that is refused (tens of seconds on a
        # loaded machine).
        if args.study:
            print(f"study {args.study!r}, evaluate runs: {url}", flush=True)
            print(f"study {args.study!r}, charts of its {len(links.cell_run_ids)} evaluate cells: {links.compare}",
                  flush=True)
        else:
            print(f"studies: {url}", flush=True)
            print(studies_hint(names), flush=True)
        if args.open:
            webbrowser.open(url)

    return serve(ui_command(uri, args.host, args.port, args.auth), base_url=base, env=env, on_ready=ready)


def cmd_server(args: argparse.Namespace) -> int:
    from ndebench.platform.server.auth import check_exposure
    from ndebench.platform.server.launch import default_settings, serve, server_command, server_environment

    warning = check_exposure("server", args.host, args.auth, args.insecure)
    backend = tracking_uri(argparse.Namespace(tracking_uri=args.backend_store_uri)) if args.backend_store_uri else None
    settings = default_settings(
        backend_store_uri=backend, artifacts_destination=args.artifacts_destination, host=args.host,
        port=args.port, public_host=args.public_host, workers=args.workers,
        allowed_hosts=tuple(h for h in (args.allowed_hosts or "").split(",") if h) or None, auth=args.auth,
        auth_cache_ttl_s=args.auth_cache_ttl,
    )
    env = server_environment(settings, args.credentials_file)
    if warning:
        print(warning, file=sys.stderr, flush=True)
    print(f"MLflow tracking server: runs in {settings.backend_store_uri}, artifacts in "
          f"{settings.artifacts_destination}, starting on {settings.host}:{settings.port}", flush=True)
    return serve(server_command(settings), base_url=settings.local_url, on_ready=settings.announce, env=env)


def cmd_grant(args: argparse.Namespace) -> int:
    from ndebench.platform.server.grant import grant_command

    return grant_command(tracking_uri(args), args.study, args.user, args.credentials_out)
