"""The report's vocabularies, spelled once for the config (``report:``), the command line and the report."""
from __future__ import annotations

TESTS = ("student", "welch", "paired")
CORRECTIONS = ("none", "holm", "bh")
# auto: every per-(model, dataset) figure below 50 pairs, the summary ones from there on (report.drawing).
FIGURE_MODES = ("auto", "all", "summary", "none")


def default_test(protocol: str) -> str:
    """The report's test against ``none`` when no test is given: ``paired`` under the paper protocol, whose seed
    fixes the data split and the initialisation in every cell, else ``student``."""
    return "paired" if protocol == "paper" else "student"
