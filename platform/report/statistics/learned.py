"""Whether a cell learned at all: the margin below chance and the flag a cell that did not learn carries.

A cell learned when the mean over its ``ok`` seeds of the final epoch's training loss is at least :data:`MARGIN`
below the chance-level loss ``ln K`` of a K-class task (:mod:`~ndebench.platform.report.learning` computes it);
the tables, the console and the learning figures mark a cell that did not with :data:`FLAG`.
"""
from __future__ import annotations

MARGIN = 0.05
FLAG = "did not learn"
