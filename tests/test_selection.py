"""Selection-adjusted p-value of the oracle (best of K grid points on test): exact against brute force, and its
level under a null where no grid point differs from the baseline, where the oracle's plain p-value is too small."""
import itertools

import numpy as np
import pandas as pd
import pytest
from ndebench.platform.report import audit
from ndebench.platform.report.statistics.selection import chance_gain, selection_adjusted_p
from ndebench.platform.report.statistics.stats import two_sample_test


def _brute_force(values: np.ndarray, sign: float = 1.0) -> float:
    """Every within-seed assignment of the K + 1 values to the cells, enumerated: ((K + 1)!)^n of them."""
    values = sign * values
    cells, n = values.shape

    def statistic(v: np.ndarray) -> float:
        return float(np.max(v[1:].mean(axis=1) - v[0].mean()))

    observed = statistic(values)
    orders = list(itertools.permutations(range(cells)))
    hits = total = 0
    for choice in itertools.product(orders, repeat=n):
        permuted = np.stack([values[list(order), s] for s, order in enumerate(choice)], axis=1)
        hits += statistic(permuted) >= observed
        total += 1
    return hits / total


@pytest.mark.parametrize("higher", [True, False])
def test_the_adjusted_p_equals_the_enumeration_of_every_permutation(higher):
    # quarters: every mean over 4 seeds is exact in binary floating point, so ties are ties in both computations
    rng = np.random.default_rng(11)
    values = rng.integers(0, 40, size=(3, 4)) / 4  # none + K = 2 grid points, 4 seeds: 6^4 = 1296 permutations
    values[2] += 1.0  # one grid point looks better
    baseline = dict(enumerate(values[0]))
    grid = {f"g{k}": dict(enumerate(values[k])) for k in (1, 2)}
    p = selection_adjusted_p(baseline, grid, higher_is_better=higher, resamples=10_000)
    assert p == _brute_force(values, 1.0 if higher else -1.0)
    assert 0 < p < 1


def test_only_the_seeds_every_cell_has_count():
    baseline = {0: 0.5, 1: 0.625, 2: 0.75, 3: 0.25, 9: 0.125}
    grid = {"a": {0: 0.5, 1: 0.75, 2: 0.625, 3: 0.375}, "b": {0: 0.875, 1: 0.625, 2: 0.75, 3: 0.5, 7: 1.0}}
    full = np.array([[0.5, 0.625, 0.75, 0.25], [0.5, 0.75, 0.625, 0.375], [0.875, 0.625, 0.75, 0.5]])
    assert selection_adjusted_p(baseline, grid) == _brute_force(full)
    assert np.isnan(selection_adjusted_p({0: 0.5}, {"a": {0: 0.6}})) and np.isnan(selection_adjusted_p(baseline, {}))


def test_under_the_null_the_adjusted_test_keeps_its_level_and_the_plain_p_of_the_oracle_does_not():
    alpha, draws, k, n = 0.05, 400, 10, 5
    rng = np.random.default_rng(2024)
    adjusted = plain = 0
    for draw in range(draws):
        values = rng.normal(0, 1, size=(k + 1, n))
        baseline = dict(enumerate(values[0]))
        grid = {f"g{j}": dict(enumerate(values[j])) for j in range(1, k + 1)}
        adjusted += selection_adjusted_p(baseline, grid, resamples=199, seed=draw) <= alpha
        oracle = 1 + int(np.argmax(values[1:].mean(axis=1)))
        plain += two_sample_test(values[oracle], values[0], "student").p <= alpha
    se = np.sqrt(alpha * (1 - alpha) / draws)
    assert adjusted / draws <= alpha + 3 * se
    assert plain / draws > alpha + 3 * se


def test_the_chance_gain_is_the_expected_maximum_of_k_means():
    residuals = np.random.default_rng(5).normal(0, 0.04, size=20_000)
    # E[max of 20 standard normals] = 1.8675; the baseline's mean adds no bias; bootstrap SE ~ 0.012 sigma/sqrt(5)
    expected = 1.8675 * 0.04 / np.sqrt(5)
    assert chance_gain(residuals, 20, 5) == pytest.approx(expected, rel=0.03)
    assert chance_gain(residuals, 1, 5) == pytest.approx(0, abs=0.03 * expected)
    assert np.isnan(chance_gain(np.array([0.1]), 20, 5))


def test_the_audit_row_carries_the_adjusted_p_of_its_grid():
    rng = np.random.default_rng(4)
    means = {("none", ""): 0.7, ("continuum_dropout", ""): 0.7,
             ("continuum_dropout", "continuum_dropout[p=0.1,m=5]"): 0.71,
             ("continuum_dropout", "continuum_dropout[p=0.5,m=5]"): 0.69}
    rows = [{"model": "neural_cde", "dataset": "uea/GunPoint", "regularizer": r, "variant": v, "seed": s,
             "status": "ok", "test_accuracy": m + rng.normal(0, 0.02)} for (r, v), m in means.items() for s in range(4)]
    runs = pd.DataFrame(rows)
    [row] = audit.selection_audit(runs, {"uea/GunPoint": "test_accuracy"}).itertuples()
    named = runs["variant"].where(runs["variant"] != "", runs["regularizer"])
    cell = {v or r: runs.loc[named == (v or r)].set_index("seed")["test_accuracy"].to_dict() for r, v in means}
    grid = {v: cell[v] for _, v in means if v}
    assert row.selection_adjusted_p == selection_adjusted_p(cell["none"], grid)
    best = np.array(list(cell[row.oracle_variant].values()))
    assert row.oracle_difference == pytest.approx(best.mean() - np.mean(list(cell["none"].values())), abs=1e-12)
    oracle, none = cell[row.oracle_variant], cell["none"]
    assert row.oracle_plain_p == two_sample_test(list(oracle.values()), list(none.values()), "paired",
                                                 seeds_a=list(oracle), seeds_b=list(none)).p


def test_the_expected_maximum_of_k_normals_and_the_chance_factor():
    from ndebench.platform.report.statistics.agreement import chance_factor, expected_max

    assert expected_max(1) == pytest.approx(0.0, abs=1e-12)
    assert expected_max(2) == pytest.approx(1 / np.sqrt(np.pi), rel=1e-10)  # E[max(Z1, Z2)] = 1 / sqrt(pi)
    assert expected_max(3) == pytest.approx(1.5 / np.sqrt(np.pi), rel=1e-10)
    assert chance_factor(20, 5) == pytest.approx(expected_max(20) / np.sqrt(5))
    # the bootstrap chance gain of normal residuals approaches expected_max(k) sigma / sqrt(n)
    residuals = np.random.default_rng(0).standard_normal(20000)
    draws = 4000
    gain = chance_gain(residuals, 20, 5, draws=draws)
    se = np.sqrt((0.28 + 1) / 5 / draws)  # per draw: Var(max of 20 normals) = 0.28 over 5 seeds, plus one mean
    assert gain == pytest.approx(chance_factor(20, 5), abs=4 * se)
    with pytest.raises(ValueError, match="k must be at least 1, got 0"):
        expected_max(0)
