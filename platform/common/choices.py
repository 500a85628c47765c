"""The report's vocabularies, spelled once for the config (``report:``), the command line and the report."""
from __future__ import annotations

TESTS = ("student", "welch", "paired")
CORRECTIONS = ("none", "holm", "bh")
# auto: every per-(model, dataset) figure below 50 pairs, the summary ones from there on (report.drawing).
FIGURE_MODES = ("auto", "all", "summary", "none")
