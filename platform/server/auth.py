"""MLflow's basic-auth app for ``ndebench server --auth``: a tracking server only its team can write to.

The admin account comes from ``$MLFLOW_TRACKING_USERNAME`` / ``$MLFLOW_TRACKING_PASSWORD`` (the variables every
MLflow client, and so every sweep and ``ndebench report``, sends as HTTP basic credentials) or from a file of
``username = ...`` and ``password = ...`` lines, never from the command line, where ``ps`` would show it to every
user of the machine. The server's users live in their own sqlite database beside the runs; the admin credentials
and the Flask secret key reach the server process through its environment only, never a file.
"""
from __future__ import annotations

import configparser
import importlib.util
import ipaddress
import os
import secrets
import socket
from pathlib import Path

USERNAME_VAR, PASSWORD_VAR = "MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD"
PASSWORD_CACHE_TTL_S = 60  # the default of --auth-cache-ttl: see auth_environment


class AuthError(ValueError):
    """Admin credentials are missing or malformed; the message says where they are read from."""


def admin_credentials(credentials_file: str | None = None) -> tuple[str, str]:
    """``(username, password)`` from ``credentials_file`` (lines ``username = NAME``, ``password = SECRET``)
    or, without a file, from ``$MLFLOW_TRACKING_USERNAME`` and ``$MLFLOW_TRACKING_PASSWORD``."""
    if credentials_file:
        parser = configparser.ConfigParser()
        try:
            parser.read_string("[auth]\n" + Path(credentials_file).read_text())
        except (OSError, configparser.Error) as exc:
            raise AuthError(f"--credentials-file {credentials_file!r} is not readable as 'username = ...' and "
                            f"'password = ...' lines: {exc}") from None
        username, password = parser["auth"].get("username", ""), parser["auth"].get("password", "")
        where = f"--credentials-file {credentials_file!r}"
    else:
        username, password = os.environ.get(USERNAME_VAR, ""), os.environ.get(PASSWORD_VAR, "")
        where = f"${USERNAME_VAR} and ${PASSWORD_VAR}"
    if not username or not password:
        raise AuthError(f"--auth needs the admin username and password from {where} (both non-empty); they are "
                        "never read from the command line")
    if len(password) < 12:
        raise AuthError(f"the admin password from {where} has {len(password)} characters; use at least 12")
    return username, password


def check_installed() -> None:
    """MLflow's basic-auth app imports Flask-WTF, which only ``mlflow[auth]`` (the ``cluster`` extra) installs."""
    if importlib.util.find_spec("flask_wtf") is None:
        raise AuthError("--auth needs MLflow's basic-auth app, which needs Flask-WTF: pip install 'ndebench[cluster]' "
                        "(or 'mlflow[auth]')")


def auth_environment(folder: Path, username: str, password: str,
                     cache_ttl_s: int = PASSWORD_CACHE_TTL_S) -> dict[str, str]:
    """Write MLflow's ``basic_auth.ini`` (owner-only, no secret in it) under ``folder`` and return the server's
    environment: ``MLFLOW_AUTH_CONFIG_PATH``, the admin account (``MLFLOW_AUTH_ADMIN_USERNAME`` / ``_PASSWORD``,
    used when the user database is created) and a Flask secret key (``$MLFLOW_FLASK_SERVER_SECRET_KEY`` if set, so
    that several servers agree, else a new random one).

    ``cache_ttl_s`` is MLflow's ``auth_cache_ttl_seconds``: a server worker that has checked a user's password
    accepts it again for that long without the password hash (scrypt, about 0.15 s of CPU a request on a 2-core
    machine, which otherwise bounds a sweep's requests); a password changed or a user deleted through another
    worker is refused by this one at most that much later. 0 checks every request."""
    folder.mkdir(parents=True, exist_ok=True)
    config = configparser.ConfigParser(interpolation=None)
    config["mlflow"] = {
        # Team members are added with MLflow's user API; until granted more, a signed-in user may only read.
        "default_permission": "READ",
        "database_uri": f"sqlite:///{(folder / 'basic_auth.db').resolve()}",
        "authorization_function": "mlflow.server.auth:authenticate_request_basic_auth",
        "auth_cache_ttl_seconds": str(cache_ttl_s),
    }
    path = folder / "basic_auth.ini"
    path.touch(mode=0o600)
    path.chmod(0o600)
    with path.open("w") as stream:
        config.write(stream)
    key = os.environ.get("MLFLOW_FLASK_SERVER_SECRET_KEY") or secrets.token_hex(32)
    return {"MLFLOW_AUTH_CONFIG_PATH": str(path.resolve()), "MLFLOW_FLASK_SERVER_SECRET_KEY": key,
            "MLFLOW_AUTH_ADMIN_USERNAME": username, "MLFLOW_AUTH_ADMIN_PASSWORD": password}


def is_loopback(host: str) -> bool:
    """``host`` is a loopback address, or a name every address of which is one (``localhost``, ``127.0.1.1``)."""
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        pass
    try:
        addresses = {info[4][0] for info in socket.getaddrinfo(host, None)}
    except OSError:
        return False
    return bool(addresses) and all(ipaddress.ip_address(a.split("%")[0]).is_loopback for a in addresses)


def check_exposure(command: str, host: str, auth: bool, insecure: bool) -> str | None:
    """Refuse (:class:`AuthError`, exit 2) ``ndebench COMMAND --host HOST`` beyond this machine without ``--auth``
    unless ``--insecure`` opts in; return the warning to print for that opt-in, else ``None``."""
    if auth or is_loopback(host):
        return None
    exposed = (f"{command} --host {host} without --auth lets anyone who reaches the port read, change and delete "
               "every run and upload artifacts")
    if not insecure:
        raise AuthError(f"{exposed}: pass --auth (docs/cluster.md, 'A tracking server for a team'), or --insecure on a "
                        "network only trusted machines reach")
    return f"warning: --insecure: {exposed}"
