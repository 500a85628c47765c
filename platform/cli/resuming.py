"""The command that continues a stopped sweep, and what ``--resume`` says when it names a study already complete
while another study of the same config file is interrupted (the user left out the first run's ``--set``)."""
from __future__ import annotations

import argparse
import shlex
import shutil
import sys
from pathlib import Path

from ndebench.platform.cli.configcheck import overrides

# Options that name the study (``--set study=...``), its stores, or the cluster and data a resume must reach
# again; their defaults, which the command leaves out.
STORE_OPTIONS = {"tracking_uri": None, "data_dir": None, "storage_path": "ray_results", "address": None,
                 "out": "reports"}
SWITCHES = ("single_node", "retry_diverged")
SET_COMMENT = "# --set "


def ndebench_command() -> str:
    """``ndebench`` as a new shell runs this installation: the word itself where ``PATH`` finds this one, else
    the console script beside the interpreter (``<venv>/bin/ndebench``, absolute), so that a printed command
    runs as printed without activating the virtual environment."""
    script = Path(sys.executable).parent / "ndebench"
    found = shutil.which("ndebench")
    if not script.is_file() or (found is not None and Path(found).resolve() == script.resolve()):
        return "ndebench"
    return str(script.absolute())


def resume_command(args: argparse.Namespace) -> str:
    """``ndebench run CONFIG --set ... --tracking-uri ... --resume``: the run command ``args`` came from with every
    option that names its study or stores, shell-quoted so that it can be pasted."""
    words = [ndebench_command(), "run", args.config]
    if sets := overrides(args):
        words += ["--set", *sets]
    for name, default in STORE_OPTIONS.items():
        if (value := getattr(args, name, None)) not in (None, default):
            words += [f"--{name.replace('_', '-')}", str(value)]
    words += [f"--{name.replace('_', '-')}" for name in SWITCHES if getattr(args, name, False)]
    return shlex.join([*words, "--resume"])


def complete_study_note(args: argparse.Namespace, study: str, uri: str) -> str | None:
    """With ``--resume`` of a study whose study run is ``done``: a line saying that nothing is rerun and the report
    is written again (how a second ``make quickstart`` ends), naming each other study of the same config file (the
    YAML recorded in its study run, less its ``# --set`` lines) that is interrupted, with the command that resumes
    it; ``None`` for any other study."""
    from ndebench.platform.record.schema import TAG
    from ndebench.platform.record.tracking import search, study_names, study_yaml

    def status(name: str) -> str | None:
        found = search(uri, name, f"tags.`{TAG}kind` = 'study'")
        return found[0].data.tags.get(f"{TAG}status") if found else None

    if not args.resume or status(study) != "done":
        return None
    text = Path(args.config).read_text()
    stopped = []
    for name in study_names(uri):
        if name == study or status(name) != "interrupted" or (recorded := study_yaml(uri, name)) is None:
            continue
        sets = [line[len(SET_COMMENT):] for line in recorded.splitlines() if line.startswith(SET_COMMENT)]
        if recorded == text + "".join(f"{SET_COMMENT}{item}\n" for item in sets):
            again = argparse.Namespace(**{**vars(args), "set": [sets] if sets else None})
            stopped.append(f"study {name!r} of the same config is interrupted: `{resume_command(again)}` continues it")
    return (f"note: study {study!r} is already complete, so --resume has nothing to rerun; "
            + ("; ".join(stopped) if stopped else "its report is written again (`--set study=NAME` runs a new study)"))
