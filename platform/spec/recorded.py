"""The report settings a study recorded: ``ndebench report`` reads them so that a study reported later gets the
test, alpha, correction and figures its sweep's own report used, unless a flag says otherwise."""
from __future__ import annotations

import dataclasses
from typing import Any

import yaml
from ndebench.platform.spec.config import ConfigError, ReportConfig, apply_overrides
from ndebench.platform.spec.sections import _dataclass_from

SET_LINE = "# --set "


def recorded_report(text: str | None) -> ReportConfig:
    """The ``report:`` section of a study's recorded ``sweep.yaml`` (the file's text with the run's ``--set``
    overrides appended as ``# --set KEY=VALUE`` lines), validated; the defaults when ``text`` is ``None``
    (a study written by an older version or by the API) or has no such section. ``ConfigError`` names a bad
    value."""
    if text is None:
        return ReportConfig()
    try:
        raw = yaml.safe_load(text) or {}
    except yaml.YAMLError as exc:
        raise ConfigError(f"the study's recorded sweep.yaml is not valid YAML ({exc})") from None
    overrides = [line[len(SET_LINE):] for line in text.splitlines() if line.startswith(SET_LINE)]
    raw = apply_overrides(raw if isinstance(raw, dict) else {}, overrides)
    return _dataclass_from(ReportConfig, raw.get("report"), "report")


def report_settings(recorded: ReportConfig, **given: Any) -> dict[str, Any]:
    """``recorded``'s fields with every ``given`` value that is not ``None`` in their place."""
    return {**dataclasses.asdict(recorded), **{k: v for k, v in given.items() if v is not None}}
