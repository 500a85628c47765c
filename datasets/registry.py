"""Dataset registry: ``register_dataset``, ``create_dataset``, ``list_datasets``, ``dataset_info``.

Names are either plain (``synthetic``) or a family and a member (``uea/BasicMotions``); a family's factory
receives the member as ``member=``. A registration holds every fact the platform asks of a dataset without
loading it (expected shape, where its files are, a cheap header check, missing values, primary metric), so
``ndebench datasets``, the sweep's preflight and the trial read the registration and nothing else.
"""
from __future__ import annotations

import dataclasses
import difflib
import inspect
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, get_args

from ndebench.datasets.bundle import DatasetBundle
from ndebench.datasets.catalog import BUILTINS
from ndebench.platform.common.registry import Registry, UnknownNameError

Metric = Literal["accuracy", "auroc", "top5_accuracy"]
METRICS: tuple[str, ...] = get_args(Metric)
# What ``expected`` may say: samples (or raw ``files``), classes, channels and length per sample for a time
# series; ``train`` and ``test`` image counts, classes, channels and ``image_size`` (H, W) for images.
EXPECTED_KEYS = ("samples", "files", "classes", "channels", "length", "train", "test", "image_size")
DataDir = str | os.PathLike | None
Member = str | None
Expected = Mapping[str, Any]


def _in_memory(member: Member, data_dir: DataDir) -> str:
    return "provided by the dataset's factory (no files registered)"


@dataclass(frozen=True)
class DatasetInfo:
    """Everything the platform knows about a dataset before loading it.

    ``expected``: the public archive's sizes (keys :data:`EXPECTED_KEYS`; empty when unknown), or a function
    of the member for a family. ``locate(member, data_dir) -> str`` says where the files are (the
    ``source`` column of ``ndebench datasets list``) and raises :class:`MissingDataError` when they are not on
    disk. ``probe(member, data_dir)`` (optional) reads headers, counts or checksums without loading the data,
    raises :class:`CorruptFileError` naming a bad file, and may return counts (e.g. ``{"files": 40336}``) that
    ``datasets check`` compares with ``expected``. ``missing_values``: NaNs are part of the data (else they
    are reported as a problem). ``metric``: the primary metric (``val_<metric>``, the ``ndebench.metric`` tag,
    the report's tables), or a function of the member. :func:`dataset_info` resolves both functions for one
    name, so there ``expected`` is a mapping and ``metric`` a metric name. ``accepts(member)`` (optional): a
    family that reads members beyond its list by name (an archive's sets), whose files ``locate`` then finds.
    ``display``: the name a paper's tables print (``PhysioNet Sepsis``); a family's members print as the member
    (``uea/BasicMotions`` -> ``BasicMotions``).
    """

    name: str
    summary: str
    family: bool
    members: Callable[[], list[str]] | None = None
    input_kind: str = "timeseries"
    expected: Expected | Callable[[str], Expected] = dataclasses.field(default_factory=dict)
    locate: Callable[[Member, DataDir], str] = _in_memory
    probe: Callable[[Member, DataDir], Mapping[str, int] | None] | None = None
    missing_values: bool = False
    metric: Metric | Callable[[str], Metric] = "accuracy"
    member: Member = None
    accepts: Callable[[str], bool] | None = None
    display: str = ""


REGISTRY: Registry[DatasetBundle, DatasetInfo] = Registry(
    "dataset", builtins=sorted({f"ndebench.datasets.{d.module}" for d in BUILTINS.values()}),
    entry_point="ndebench.datasets",
)


def _checked_expected(name: str, expected: Expected) -> Expected:
    unknown = sorted(set(expected) - set(EXPECTED_KEYS))
    if unknown:
        raise ValueError(f"dataset {name!r}: expected has unknown key(s) {unknown}; valid: {', '.join(EXPECTED_KEYS)}")
    return expected


def _checked_metric(name: str, metric: str) -> Metric:
    if metric not in METRICS:
        raise ValueError(f"dataset {name!r}: metric {metric!r} is not one of {', '.join(METRICS)}")
    return metric  # type: ignore[return-value]


def register_dataset(
    name: str,
    *,
    summary: str,
    members: Callable[[], list[str]] | None = None,
    input_kind: str = "timeseries",
    expected: Expected | Callable[[str], Expected] | None = None,
    locate: Callable[[Member, DataDir], str] = _in_memory,
    probe: Callable[[Member, DataDir], Mapping[str, int] | None] | None = None,
    missing_values: bool = False,
    metric: Metric | Callable[[str], Metric] = "accuracy",
    accepts: Callable[[str], bool] | None = None,
    display: str = "",
) -> Callable[[Callable[..., DatasetBundle]], Callable[..., DatasetBundle]]:
    """Decorator registering a dataset factory ``(*, seed, data_dir, **options) -> DatasetBundle``.

    A family (``members`` given) is named ``<name>/<member>`` and its factory also receives ``member``.
    ``input_kind`` (``timeseries`` or ``image``) decides which models can take the dataset. The other facts
    are described in :class:`DatasetInfo`; only ``summary`` is required (shape "unknown", no file check,
    no missing values, accuracy as the metric).
    """
    if isinstance(expected, Mapping):
        _checked_expected(name, expected)
    if isinstance(metric, str):
        _checked_metric(name, metric)
    info = DatasetInfo(name, summary, members is not None, members, input_kind, expected or {}, locate, probe,
                       bool(missing_values), metric, accepts=accepts, display=display or name)

    return REGISTRY.register(name, info)


def split_name(name: str) -> tuple[str, str | None]:
    """``"uea/BasicMotions"`` -> ``("uea", "BasicMotions")``; ``"synthetic"`` -> ``("synthetic", None)``.

    Raises :class:`UnknownNameError` listing the valid names for an unknown dataset or family member.
    """
    family, _, member = name.partition("/")
    if family not in REGISTRY:
        raise UnknownNameError(f"unknown dataset {name!r}{_close(name, list_datasets())}; valid datasets: "
                               f"{', '.join(_valid_names())}")
    info = REGISTRY.info(family)
    if info.family:
        valid = info.members()
        if member not in valid and not (member and info.accepts and info.accepts(member)):
            raise UnknownNameError(f"unknown {family} dataset {member!r} in {name!r}"
                                   f"{_close(member, valid, family)}; valid: {', '.join(valid)}")
        return family, member
    if member:
        raise UnknownNameError(f"dataset {family!r} takes no '/<member>' suffix (got {name!r})")
    return family, None


def _close(name: str, names: list[str], family: str = "") -> str:
    """``" (did you mean 'x'?)"`` for the names of ``names`` closest to ``name`` (a typo; members of ``family``
    compared without its prefix), else ``""``."""
    close = [f"{family}/{c}" if family else c for c in difflib.get_close_matches(name, names, n=3)]
    return f" (did you mean {' or '.join(map(repr, close))}?)" if close else ""


def _valid_names() -> list[str]:
    """Plain datasets by name, families as ``<family>/<member>`` (members are listed by ``datasets list``)."""
    return [f"{family}/<member>" if REGISTRY.info(family).family else family for family in REGISTRY.names()]


def display_name(name: str) -> str:
    """The name of dataset ``name`` in a paper's tables: a family member's own name (``uea/BasicMotions`` ->
    ``BasicMotions``), else its registered ``display`` (``sepsis`` -> ``PhysioNet Sepsis``); ``name`` itself when
    it is not registered."""
    family, _, member = name.partition("/")
    if member:
        return member
    return REGISTRY.info(family).display if family in REGISTRY else name


def create_dataset(name: str, **kwargs: Any) -> DatasetBundle:
    """Load dataset ``name`` (``seed``, ``data_dir`` and dataset options such as ``missing_rate`` as kwargs)."""
    family, member = split_name(name)
    if member is not None:
        kwargs["member"] = member
    return REGISTRY.create(family, **kwargs)


def list_datasets() -> list[str]:
    """Every loadable name: plain datasets and ``family/member`` for each family member."""
    names: list[str] = []
    for family in REGISTRY.names():
        info = REGISTRY.info(family)
        names += [f"{family}/{m}" for m in info.members()] if info.family else [family]
    return names


def dataset_info(name: str) -> DatasetInfo:
    """The registration of dataset ``name`` with its member-dependent facts resolved: ``expected`` is the
    member's mapping, ``metric`` its metric name and ``member`` the member (None for a plain dataset)."""
    family, member = split_name(name)
    info = REGISTRY.info(family)
    expected, metric = info.expected, info.metric
    if callable(expected):
        expected = _checked_expected(name, expected(member) or {})
    if callable(metric):
        metric = _checked_metric(name, metric(member))
    return dataclasses.replace(info, expected=expected, metric=metric, member=member)


def dataset_options(name: str) -> list[str]:
    """The options a dataset's factory accepts besides ``seed``, ``data_dir`` and ``member`` (config keys)."""
    family, _ = split_name(name)
    factory = REGISTRY.get(family)
    parameters = inspect.signature(factory).parameters
    return sorted(k for k in parameters if k not in ("seed", "data_dir", "member"))
