"""Whether a cell learned at all: the rule and the flag a cell that did not learn carries.

A cell learned when its test accuracy over its ``ok`` seeds is shown above chance, ``1/K`` for a K-class task (the
accuracy of a uniform guess): a one-sided one-sample t-test over the seeds (``scipy.stats.ttest_1samp``,
``alternative="greater"``) at :data:`ALPHA`, or, with one seed or no spread over seeds, the mean above ``1/K``.
Accuracy is the one quantity both arms of a comparison share: a regularizer's training loss is that of a masked,
stochastic pass and ``none``'s of a deterministic one, so a loss threshold would judge them on different scales
(:mod:`~ndebench.platform.report.learning` computes it); the tables, the console and the learning figures mark a
cell that did not learn with :data:`FLAG`.
"""
from __future__ import annotations

ALPHA = 0.05
FLAG = "did not learn"
RULE = ("the test accuracy over the seeds is not shown above chance 1/K (one-sided one-sample t-test, p >= "
        f"{ALPHA:g}; with one seed or no spread, not above it)")
