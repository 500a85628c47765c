"""Imports the module of every built-in regularizer that :mod:`ndebench.regularizers.catalog` declares, so that
each registers itself."""
import importlib

from ndebench.regularizers.catalog import BUILTINS

for _module in sorted({declared.module for declared in BUILTINS.values()}):
    importlib.import_module(f"ndebench.regularizers.{_module}")
