"""``ndebench grant``: a non-admin MLflow user for the nodes and jobs of one study, on a server run with ``--auth``.

The admin account stays with whoever runs the server. Run as that admin (``$MLFLOW_TRACKING_USERNAME`` /
``$MLFLOW_TRACKING_PASSWORD``), ``grant`` creates the study's experiment if it is missing (and refuses one on which
a user other than an admin and the worker may do more than read, or on which the worker already has ``MANAGE``:
MLflow makes the creator of an experiment its manager, who could then rewrite or delete the worker's runs, or grant
itself or another account in, or hand the experiment, with what it planted there, to the worker before giving up
its own permission), creates the worker user
with a random password (or keeps an existing user's password), and gives it ``EDIT`` on that experiment only
(MLflow's basic-auth permissions; the server's default for everything else is ``READ``). The new password is
written to an owner-only file in the format of MLflow's own ``~/.mlflow/credentials``, never printed, so it reaches
the nodes as a file rather than through a Ray Job's ``env_vars`` (which Ray logs and its dashboard shows).
"""
from __future__ import annotations

import os
import secrets
from dataclasses import dataclass
from pathlib import Path

from ndebench.platform.server.auth import USERNAME_VAR, AuthError

PERMISSION = "EDIT"


@dataclass(frozen=True)
class Grant:
    """The outcome: the user, the study's ``experiment_id``, whether the user was ``created`` and the
    ``credentials_file`` written (``None`` for an existing user whose password was kept)."""

    username: str
    experiment_id: str
    created: bool
    credentials_file: Path | None


def write_credentials(path: Path, username: str, password: str) -> None:
    """``path`` (mode 0600, created so before any secret is written) in MLflow's credentials-file format."""
    path.parent.mkdir(parents=True, exist_ok=True)
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(descriptor, 0o600)
    with os.fdopen(descriptor, "w") as stream:
        stream.write(f"[mlflow]\nmlflow_tracking_username = {username}\nmlflow_tracking_password = {password}\n")


def holders(uri: str, experiment_id: str, worker: str) -> list[str]:
    """The users, admins and ``worker`` aside, whose permission on the experiment goes beyond reading it (``USE``,
    ``EDIT`` or ``MANAGE``, granted or through a role): its creator, or anyone the creator let in before giving
    up its own permission (one request per user of the server, as its admin)."""
    from mlflow.server.auth.client import AuthServiceClient
    from mlflow.server.auth.permissions import get_permission
    from mlflow.server.auth.routes import LIST_USERS
    from mlflow.utils.credentials import get_default_host_creds
    from mlflow.utils.rest_utils import http_request, verify_rest_response

    response = verify_rest_response(http_request(get_default_host_creds(uri), LIST_USERS, "GET"), LIST_USERS)
    client = AuthServiceClient(uri)
    others = [user["username"] for user in response.json().get("users", [])
              if not user.get("is_admin") and user["username"] != worker]
    return sorted(name for name in others if get_permission(
        client.get_user_permission(name, "experiment", experiment_id).permission).can_use)


def _manages(uri: str, experiment_id: str, username: str) -> bool:
    """Whether ``username`` has ``MANAGE`` on the experiment (granted directly)."""
    from mlflow.exceptions import MlflowException
    from mlflow.server.auth.client import AuthServiceClient

    try:
        return AuthServiceClient(uri).get_user_permission(username, "experiment", experiment_id).permission == "MANAGE"
    except MlflowException:  # no such user, or no permission of its own on the experiment
        return False


def grant_worker(uri: str, study: str, username: str, credentials_file: Path) -> Grant:
    """Give ``username`` (created with a random 32-character password if missing) ``EDIT`` on ``study``'s
    experiment on the tracking server ``uri``, as the admin of ``$MLFLOW_TRACKING_USERNAME``; a new password goes
    to ``credentials_file`` only. Raises :class:`AuthError` for a worker named like the admin, a non-server URI or a
    study whose experiment exists and a user other than an admin and ``username`` may write (:func:`holders`)."""
    from mlflow.exceptions import MlflowException
    from mlflow.protos.databricks_pb2 import RESOURCE_ALREADY_EXISTS, RESOURCE_DOES_NOT_EXIST, ErrorCode
    from mlflow.server.auth.client import AuthServiceClient
    from ndebench.platform.record.store import ensure_experiment

    if not uri.startswith(("http://", "https://")):
        raise AuthError(f"--tracking-uri {uri!r}: users exist on a tracking server run with `ndebench server "
                        "--auth` (http://HOST:PORT)")
    if username == os.environ.get(USERNAME_VAR):
        raise AuthError(f"--user {username!r} is the admin account (${USERNAME_VAR}); name a separate worker user")
    from mlflow.tracking import MlflowClient

    existing = MlflowClient(uri).get_experiment_by_name(study)
    if existing is not None and (others := holders(uri, existing.experiment_id, username)):
        raise AuthError(f"study {study!r}: its experiment (id {existing.experiment_id}) exists and "
                        f"{', '.join(repr(o) for o in others)}, not an admin or {username!r}, may write or manage it: "
                        "they could rewrite or delete the worker's runs, so grant refuses it; choose another study "
                        "name, or have an admin delete that experiment (`mlflow experiments delete` and `mlflow gc`) "
                        "first")
    if existing is not None and _manages(uri, existing.experiment_id, username):
        raise AuthError(f"study {study!r}: its experiment (id {existing.experiment_id}) exists and {username!r} "
                        f"already has MANAGE on it, which grant never gives: the experiment's maker handed it over "
                        "and may have left runs or lease records in it, so grant refuses it; choose another study "
                        "name, or have an admin delete that experiment (`mlflow experiments delete` and `mlflow gc`) "
                        "first")
    experiment_id = ensure_experiment(uri, study)
    client = AuthServiceClient(uri)
    created, written = False, None
    try:
        client.get_user(username)
    except MlflowException as exc:
        if exc.error_code != ErrorCode.Name(RESOURCE_DOES_NOT_EXIST):
            raise
        password = secrets.token_urlsafe(24)
        write_credentials(credentials_file, username, password)
        client.create_user(username, password)
        created, written = True, credentials_file
    try:
        client.grant_user_permission(username, "experiment", experiment_id, PERMISSION)
    except MlflowException as exc:
        if exc.error_code != ErrorCode.Name(RESOURCE_ALREADY_EXISTS):
            raise
        client.revoke_user_permission(username, "experiment", experiment_id)
        client.grant_user_permission(username, "experiment", experiment_id, PERMISSION)
    return Grant(username, experiment_id, created, written)


def grant_command(uri: str, study: str, username: str, credentials_out: str | None) -> int:
    """``ndebench grant``: :func:`grant_worker`, then a line on what was done and where the password is."""
    granted = grant_worker(uri, study, username, Path(credentials_out or f"mlflow-credentials-{username}").resolve())
    what = "created" if granted.created else "exists (password kept)"
    print(f"user {username!r} {what}: {PERMISSION} on study {study!r} (experiment {granted.experiment_id})", flush=True)
    if granted.credentials_file:
        print(f"its password is in {granted.credentials_file} (mode 0600): copy it to ~/.mlflow/credentials on the "
              "driver and every node (MLflow reads it there), instead of the admin's variables", flush=True)
    return 0
