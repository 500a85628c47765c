"""A tracking server that refuses this process's credentials (HTTP 401 or 403) is a configuration error: exit 2
naming the credentials, not an outage (exit 3), which a scheduler would requeue to fail the same way again."""
from __future__ import annotations

import os

from ndebench.platform.failures.diskfull import exception_chain

# MLflow's REST client turns a plain-text 401/403 answer into these error codes (``get_error_code``).
REFUSALS = {"UNAUTHENTICATED": 401, "PERMISSION_DENIED": 403}


def refused_status(exc: BaseException) -> int | None:
    """401 or 403 when ``exc`` is MLflow's or requests' error for that answer, else ``None``."""
    code = getattr(exc, "error_code", None)
    if type(exc).__name__ in ("MlflowException", "RestException") and code in REFUSALS:
        return REFUSALS[code]
    status = getattr(getattr(exc, "response", None), "status_code", None)
    if type(exc).__module__.startswith("requests") and status in (401, 403):
        return status
    return None


def credentials_refused(exc: BaseException, tracking_uri: str) -> str | None:
    """One line naming the refused credentials and how to fix them when ``exc`` or an exception it was raised from
    is a 401/403 of the tracking server at ``tracking_uri``; ``None`` otherwise. Never shows a password."""
    status = next((s for s in map(refused_status, exception_chain(exc)) if s), None)
    if status is None:
        return None
    user = os.environ.get("MLFLOW_TRACKING_USERNAME")
    who = f"user {user!r} ($MLFLOW_TRACKING_USERNAME)" if user else "no $MLFLOW_TRACKING_USERNAME"
    if status == 401:
        return (f"the tracking server {tracking_uri} refused the credentials (HTTP 401, {who}): set "
                "$MLFLOW_TRACKING_USERNAME and $MLFLOW_TRACKING_PASSWORD, or ~/.mlflow/credentials from `ndebench "
                "grant`, to a user of that server")
    return (f"the tracking server {tracking_uri} denied {who} this study (HTTP 403): its admin grants it with "
            "`ndebench grant --study STUDY --user NAME`")
