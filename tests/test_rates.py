"""Corollary 3.2: exact (p, m, T) -> (lambda1, lambda2) and the large-T approximation."""
import math

import pytest
from ndebench.platform.cli.main import main
from ndebench.regularizers import checks
from ndebench.regularizers.checks import M_RANGE, P_RANGE
from ndebench.regularizers.rates import (
    asymptotic_rates,
    dropout_rate,
    expected_active_time,
    expected_renewals,
    solve_rates,
)

GRID = [(p, m, T) for p in (0.01, 0.1, 0.3, 0.5, 0.9, 0.99) for m in (0.01, 1, 5, 10, 50, 100, 1000)
        for T in (0.5, 1.0, 160.0)]


@pytest.mark.parametrize("p,m,T", GRID)
def test_solver_reproduces_both_equations(p, m, T):
    r = solve_rates(p, m, T)
    assert r.lambda1 > 0 and r.lambda2 > 0
    assert dropout_rate(r.lambda1, r.lambda2, T) == pytest.approx(p, rel=1e-9, abs=0)
    assert expected_renewals(r.lambda1, r.lambda2, T) == pytest.approx(m, rel=1e-9, abs=0)


def test_rates_scale_inversely_with_horizon():
    a, b = solve_rates(0.3, 10, 1.0), solve_rates(0.3, 10, 4.0)
    assert b.lambda1 == pytest.approx(a.lambda1 / 4, rel=1e-9)
    assert b.lambda2 == pytest.approx(a.lambda2 / 4, rel=1e-9)


def test_asymptotic_formula_converges_as_renewals_grow():
    errors = []
    for m in (10, 100, 1000, 10000):
        exact, approx = solve_rates(0.3, m, 1.0), asymptotic_rates(0.3, m, 1.0)
        errors.append(abs(approx.lambda1 - exact.lambda1) / exact.lambda1)
    assert all(e2 < e1 for e1, e2 in zip(errors, errors[1:], strict=False))
    assert errors[-1] < 1e-3


def test_expected_active_time_limits():
    # Starting active, a very slow process stays active: E[active time] -> T.
    assert expected_active_time(1e-9, 1.0, 2.0) == pytest.approx(2.0, rel=1e-6)
    # A fast process spends the stationary share lambda2 / (lambda1 + lambda2) of the time active.
    assert expected_active_time(3000.0, 1000.0, 1.0) == pytest.approx(0.25, rel=1e-3)


@pytest.mark.parametrize("p,m,T,word", [
    (0.0, 10, 1, "p=0.0"), (1.0, 10, 1, "p=1.0"), (1.5, 10, 1, "p=1.5"), (-0.1, 10, 1, "p=-0.1"),
    (math.nan, 10, 1, "p=nan"),
    (0.3, 0, 1, "m=0"), (0.3, -2, 1, "m=-2"), (0.3, 10, 0, "T=0"), (0.3, 10, -1, "T=-1"),
])
def test_invalid_inputs_are_named(p, m, T, word):
    with pytest.raises(ValueError, match=word):
        solve_rates(p, m, T)


# The accepted range (issue 14): exactly what the solver handles, and nothing outside it reaches the solver.
EDGE_P = (P_RANGE[0], 1e-4, 0.5, 1 - 1e-4, P_RANGE[1])
EDGE_M = (M_RANGE[0], 1e-3, 1.0, 1e3, M_RANGE[1])


@pytest.mark.parametrize("p", EDGE_P)
@pytest.mark.parametrize("m", EDGE_M)
@pytest.mark.parametrize("T", (1e-3, 1.0, 1e4))
def test_the_whole_accepted_range_is_solved(p, m, T):
    r = solve_rates(p, m, T)
    assert dropout_rate(r.lambda1, r.lambda2, T) == pytest.approx(p, rel=1e-9, abs=0)
    assert expected_renewals(r.lambda1, r.lambda2, T) == pytest.approx(m, rel=1e-9, abs=0)


@pytest.mark.parametrize("p,m,T,message", [
    (1e-300, 10, 1.0, r"dropout rate p=1e-300 must lie in \[1e-06, 1 - 1e-06\]"),
    (P_RANGE[0] / 2, 10, 1.0, "dropout rate p="),
    (math.nextafter(P_RANGE[1], 1), 10, 1.0, "dropout rate p="),
    (0.3, 1e-12, 1.0, r"expected number of renewals m=1e-12 must lie in \[1e-06, 1e\+06\]"),
    (0.3, M_RANGE[1] * 2, 1.0, "expected number of renewals m="),
    (0.3, math.nan, 1.0, "m=nan"),
    (True, 10, 1.0, "p=True"),
    (0.3, 10, math.inf, "time horizon T=inf"),
    (0.3, 10, 1e-320, r"time horizon T=1e-320 is out of range"),
])
def test_outside_the_range_is_a_value_error_never_an_internal_one(p, m, T, message):
    with pytest.raises(ValueError, match=message):
        solve_rates(p, m, T)


def test_shared_checks_accept_exactly_the_solver_range():
    assert checks.dropout_rate(P_RANGE[0]) is None and checks.dropout_rate(P_RANGE[1]) is None
    assert checks.dropout_rate(P_RANGE[0] / 2) and checks.dropout_rate(True) and checks.dropout_rate("0.3")
    assert checks.expected_renewals(M_RANGE[0]) is None and checks.expected_renewals(M_RANGE[1]) is None
    assert checks.expected_renewals(1e-12) and checks.expected_renewals(math.inf) and checks.expected_renewals(True)


@pytest.mark.parametrize("argv,needle", [
    (["--p", "0.3", "--m", "1e-12"], "m=1e-12 must lie in [1e-06, 1e+06]"),
    (["--p", "1e-300", "--m", "10"], "p=1e-300 must lie in [1e-06, 1 - 1e-06]"),
    (["--p", "nan", "--m", "10"], "p=nan"),
    (["--p", "0.3", "--m", "10", "--T", "-1"], "T=-1.0 must be a finite number > 0"),
])
def test_rates_command_refuses_with_exit_2(capsys, argv, needle):
    assert main(["rates", *argv]) == 2
    err = capsys.readouterr().err
    assert needle in err and "Traceback" not in err


@pytest.mark.parametrize("key, value", [("m", 1e-12), ("m", 2e6), ("p", 1e-300), ("p", 1.0)])
def test_the_config_accepts_exactly_the_solvers_range(key, value):
    from ndebench.platform.spec.config import ConfigError, parse_spec

    raw = {"study": "s", "models": ["neural_cde"], "datasets": ["synthetic"],
           "regularizers": {"continuum_dropout": {key: value}}}
    with pytest.raises(ConfigError, match=rf"regularizers.continuum_dropout.{key}={value!r} must lie in \["):
        parse_spec(raw)
