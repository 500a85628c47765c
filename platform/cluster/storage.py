"""The sweep's storage location as a pyarrow filesystem: local or NFS paths, ``file://``, ``s3://``, ``gs://``.

Ray Tune gets the same filesystem (``RunConfig(storage_filesystem=...)``), so nothing in the engine writes
to the storage path through ``pathlib``.
"""
from __future__ import annotations

from pathlib import Path

import pyarrow.fs as pafs


class Storage:
    """``uri``: a path (made absolute) or a pyarrow filesystem URI; ``fs``/``root``: what it resolves to."""

    def __init__(self, uri: str | Path):
        text = str(uri)
        self.uri = text if "://" in text else str(Path(text).resolve())
        try:
            self.fs, self.root = pafs.FileSystem.from_uri(self.uri)
        except (ValueError, OSError) as exc:
            raise ValueError(f"--storage-path {text!r}: pyarrow cannot open it as a filesystem: {exc}") from None
        self.root = self.root.rstrip("/")

    def path(self, *parts: str) -> str:
        return "/".join([self.root, *parts])

    def display(self, *parts: str) -> str:
        return "/".join([self.uri.rstrip("/"), *parts])

    def exists(self, *parts: str) -> bool:
        return self.fs.get_file_info(self.path(*parts)).type != pafs.FileType.NotFound

    def write_bytes(self, data: bytes, *parts: str) -> str:
        """Write ``data`` to ``root/parts...`` (parent folders created) and return its display URI."""
        path = self.path(*parts)
        self.fs.create_dir(path.rsplit("/", 1)[0], recursive=True)
        with self.fs.open_output_stream(path) as stream:
            stream.write(data)
        return self.display(*parts)
