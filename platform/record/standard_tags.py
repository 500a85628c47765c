"""MLflow's standard run tags (user, source, git commit), which its UI shows as the User, Source and Version
columns. The fluent ``mlflow.start_run`` sets them; ``MlflowClient.create_run``, which ndebench uses to build its
run tree from any process, does not."""
from __future__ import annotations

import getpass


def standard_tags(git_commit: str | None = None) -> dict[str, str]:
    """``mlflow.user`` (this process's OS user), ``mlflow.source.name`` / ``.type`` (the ndebench job) and,
    when known, ``mlflow.source.git.commit``."""
    from mlflow.utils.mlflow_tags import MLFLOW_GIT_COMMIT, MLFLOW_SOURCE_NAME, MLFLOW_SOURCE_TYPE, MLFLOW_USER

    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # a container user without a passwd entry
        user = "unknown"
    tags = {MLFLOW_USER: user, MLFLOW_SOURCE_NAME: "ndebench", MLFLOW_SOURCE_TYPE: "JOB"}
    if git_commit and git_commit != "unknown":
        tags[MLFLOW_GIT_COMMIT] = git_commit
    return tags
