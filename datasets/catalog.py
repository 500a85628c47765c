"""The built-in datasets, each declared once: the module that registers it and its options.

:mod:`.registry` imports the modules named here (so a built-in registers itself) and ``ndebench validate``
(:mod:`ndebench.platform.spec.lint`) reads the options without importing torch. A dataset's options are its
factory's parameters besides ``seed``, ``data_dir`` and ``member`` (:func:`ndebench.datasets.registry.dataset_options`);
a family's names take a member, ``uea/BasicMotions``. ``tests/test_lint.py`` compares every entry with the registry.
A plugin dataset is read through the registry only.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Declared:
    """A built-in dataset: the module of ``ndebench.datasets`` that registers it, its options' names and whether it
    is a family (its names take a member, checked by the registry)."""

    module: str
    options: tuple[str, ...]
    family: bool = False


BUILTINS: dict[str, Declared] = {
    "cifar10": Declared("images", ("augment",)),
    "cifar100": Declared("images", ("augment",)),
    "sepsis": Declared("sepsis", ("oi", "pos_weight")),
    "speech_commands": Declared("speech_commands", ("n_mels",)),
    "stl10": Declared("images", ("augment",)),
    "svhn": Declared("images", ("augment",)),
    "synthetic": Declared("synthetic", ("length", "missing_rate", "noise", "num_samples")),
    "uea": Declared("uea", ("missing_rate",), family=True),
}
