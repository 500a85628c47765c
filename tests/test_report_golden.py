"""table.md of a crafted study, byte for byte: the speed-ups of the report (issue 42) must not move a character.

The study's accuracies are rounded to two decimals over 8 datasets, so its Wilcoxon tests see ties and zeros
(scipy's exact permutation branch). ``tests/data/ties_table.md`` was written by the report before those changes.
"""
from pathlib import Path

import numpy as np
import pandas as pd
from ndebench.platform.report.report import build_report

GOLDEN = Path(__file__).parent / "data" / "ties_table.md"


def tied_study() -> pd.DataFrame:
    rng = np.random.default_rng(7)
    rows = []
    for model in ("neural_cde", "neural_ode"):
        for j in range(8):
            for shift, regularizer in ((0.0, "none"), (0.01, "continuum_dropout"), (-0.01, "naive_dropout")):
                for seed in range(3):
                    rows.append({"run_id": f"{model}-{j}-{regularizer}-{seed}", "study": "ties", "model": model,
                                 "dataset": f"D{j}", "regularizer": regularizer, "seed": seed, "status": "ok",
                                 "metric": "accuracy",
                                 "test_accuracy": round(0.7 + 0.02 * j + shift + rng.normal(0, 0.01), 2)})
    return pd.DataFrame(rows)


def test_table_md_is_byte_identical_to_the_golden_file(tmp_path):
    files = build_report(tied_study(), tmp_path, "ties", figures="none")
    assert files.table_md.read_bytes() == GOLDEN.read_bytes()
