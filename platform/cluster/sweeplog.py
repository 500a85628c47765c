"""The sweep's log file under the storage path: this driver's own Ray output only, secrets redacted, owner-only.

A shared storage path (NFS, a bucket) is read by others, and a head node's Ray log folder holds every job's logs,
including the runtime-env agent's lines that print a Ray Job's ``env_vars``. So the file gathers only this job's
files (:meth:`~ndebench.platform.cluster.raysession.RaySession.log_text`), and before it is written, every value
of an environment variable whose name says it is a secret (``*PASSWORD*``, ``*SECRET*``, ``*TOKEN*``, ``*KEY*``,
``*CREDENTIAL*``: ``MLFLOW_TRACKING_PASSWORD``, ``MLFLOW_TRACKING_TOKEN``, ``AWS_SECRET_ACCESS_KEY``,
``AWS_SESSION_TOKEN``, ``RAY_AUTH_TOKEN`` ...) is replaced, wherever it appears, as is the value in any
``NAME=value`` or ``"NAME": "value"`` with such a name and the password of any ``scheme://user:password@`` URL.
"""
from __future__ import annotations

import os
import re
from collections.abc import Mapping

import pyarrow.fs as pafs
from ndebench.platform.cluster.storage import Storage

REDACTED = "[redacted]"
SECRET_NAME = r"[\w.-]*(?:PASSWORD|PASSWD|SECRET|TOKEN|KEY|CREDENTIAL)[\w.-]*"
# A value too short to be a secret (a flag like "1") would otherwise be replaced all over the log.
MIN_SECRET_LENGTH = 4
_QUOTED = re.compile(rf"(?P<head>{SECRET_NAME}\\?['\"]?\s*[:=]\s*(?P<esc>\\?)(?P<q>['\"]))(?P<value>.*?)(?P=esc)(?P=q)",
                     re.IGNORECASE)
_BARE = re.compile(rf"(?P<head>{SECRET_NAME}\\?['\"]?\s*[:=]\s*)(?!{re.escape(REDACTED)})[^'\"\\\s,;}}\]]+",
                   re.IGNORECASE)
_URL_PASSWORD = re.compile(r"(?P<head>://[^/\s:@]+:)[^@\s/]+@")


def redact(text: str, environ: Mapping[str, str] | None = None) -> str:
    """``text`` with the values of secret-named variables of ``environ`` (default ``os.environ``) and of secret-named
    assignments and URL passwords replaced by ``[redacted]``."""
    environ = os.environ if environ is None else environ
    name = re.compile(SECRET_NAME, re.IGNORECASE)
    values = sorted({v for k, v in environ.items() if name.fullmatch(k) and len(v) >= MIN_SECRET_LENGTH},
                    key=len, reverse=True)
    for value in values:
        text = text.replace(value, REDACTED)
    text = _QUOTED.sub(lambda m: f"{m['head']}{REDACTED}{m['esc']}{m['q']}", text)
    text = _BARE.sub(lambda m: f"{m['head']}{REDACTED}", text)
    return _URL_PASSWORD.sub(lambda m: f"{m['head']}{REDACTED}@", text)


def write_private(storage: Storage, text: str, *parts: str) -> str:
    """Write ``redact(text)`` to ``root/parts...`` (parent folders created), owner-only (0600) on a local or NFS
    path, where the file is created so before anything is written; returns its display URI. An object store has
    no file modes: its bucket policy decides who reads it."""
    data = redact(text).encode()
    if not isinstance(storage.fs, pafs.LocalFileSystem):
        return storage.write_bytes(data, *parts)
    path = storage.path(*parts)
    storage.fs.create_dir(path.rsplit("/", 1)[0], recursive=True)
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(descriptor, 0o600)
    with os.fdopen(descriptor, "wb") as stream:
        stream.write(data)
    return storage.display(*parts)
