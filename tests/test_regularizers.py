"""Defining properties of the baseline regularizers, and every regularizer on every compatible model."""
from __future__ import annotations

import dataclasses
import inspect
import math
import re
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
import torchcde
from ndebench.models.base import DataSpec, FieldMLP
from ndebench.models.integrate import SolverConfig, TrialRNG, integrate, moved_times
from ndebench.models.registry import create_model, list_models, model_info
from ndebench.platform.spec.config import ConfigError, parse_spec
from ndebench.regularizers.base import PassSpec, Regularizer
from ndebench.regularizers.catalog import BUILTINS
from ndebench.regularizers.jump_diffusion import sample_drops, sample_jumps
from ndebench.regularizers.registry import REGISTRY as REGULARIZERS
from ndebench.regularizers.registry import create_regularizer, list_regularizers, regularizer_info
from ndebench.regularizers.tabn import TemporalBatchNorm, bin_weights
from torch import nn

BASELINES = ["naive_dropout_drift", "naive_dropout_head", "jump_diffusion", "jump_diffusion_ttn", "steer", "tabn"]


def spec(batch: int, latent: int, seed: int = 0, grid: torch.Tensor | None = None, t0: float = 0.0, t1: float = 1.0):
    return PassSpec(batch, latent, t0, t1, grid, torch.Generator().manual_seed(seed), torch.device("cpu"),
                    torch.float32)


def solve(drift: nn.Module, z0: torch.Tensor, times: torch.Tensor, regularizer=None, method: str = "euler", **kw):
    return integrate(drift, z0, times, solver=SolverConfig(method), rng=TrialRNG.from_seed(0), regularizer=regularizer,
                     **kw)


def within_se(count: int, n: int, p: float, k: float = 5.0) -> bool:
    return abs(count / n - p) <= k * math.sqrt(p * (1 - p) / n)


class Zero(nn.Module):
    def forward(self, t: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        return torch.zeros_like(z)


class One(nn.Module):
    def forward(self, t: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        return torch.ones_like(z)


# ---------------------------------------------------------------- registry and search spaces


def test_all_baselines_registered_with_paper_search_spaces():
    names = list_regularizers()
    assert set(BASELINES + ["none", "continuum_dropout"]) <= set(names)
    p_grid = (0.1, 0.2, 0.3, 0.4, 0.5)
    assert regularizer_info("naive_dropout_drift").hyperparams["p"].choices == p_grid
    assert regularizer_info("naive_dropout_head").hyperparams["p"].choices == p_grid
    rates = (1e-5, 1e-4, 1e-3, 1e-2, 0.1, 0.2, 0.3, 0.4, 0.5)
    for name in ("jump_diffusion", "jump_diffusion_ttn"):
        info = regularizer_info(name)
        assert info.hyperparams["rate"].choices == rates and info.requires_fixed_step
    for name in names:
        for key, hp in regularizer_info(name).hyperparams.items():
            assert all(hp.check(c) is None for c in hp.choices), (name, key)


def test_every_module_that_registers_a_regularizer_is_in_the_catalogue():
    """The registry imports the modules the catalogue names, so a module left out of it would
    never register; the catalogue also declares every hyperparameter with a default choice its rule accepts."""
    folder = Path(__file__).resolve().parents[1] / "regularizers"
    registering = {path.stem for path in folder.glob("*.py") if "@register_regularizer(" in path.read_text()}
    assert registering == {declared.module for declared in BUILTINS.values()}
    for name, declared in BUILTINS.items():
        for key, hp in declared.hyperparams.items():
            assert hp.choices and all(hp.rule(c) is None for c in hp.choices), (name, key)


@pytest.mark.parametrize("name", sorted(BUILTINS))
def test_the_catalogue_entry_is_the_constructors_signature(name):
    """A built-in's hyperparameters are spelled three times (catalogue, ``__init__``, ``describe()``): the
    constructor takes exactly the catalogue's keys, each with a default (a config may leave any out), and an
    instance built from each key's first default choice describes itself with those values."""
    declared = BUILTINS[name].hyperparams
    parameters = inspect.signature(REGULARIZERS.get(name)).parameters
    assert sorted(parameters) == sorted(declared)
    assert [k for k, p in parameters.items() if p.default is inspect.Parameter.empty] == []
    chosen = {key: hp.choices[0] for key, hp in declared.items()}
    described = create_regularizer(name, **chosen).describe()
    assert {key: described.get(key) for key in declared} == chosen


@pytest.mark.parametrize("name", BASELINES)
def test_describe_states_test_protocol(name):
    reg = create_regularizer(name)
    info = reg.describe()
    assert info["test_time"] in ("deterministic", "mc")
    assert (info["test_time"] == "mc") == (name == "jump_diffusion_ttn")
    if info["test_time"] == "mc":
        assert info["n_mc"] == 5


@pytest.mark.parametrize(
    "name, key, value",
    [("naive_dropout_drift", "p", 1.0), ("jump_diffusion", "rate", 0.0), ("steer", "b", 1.0), ("tabn", "bins", 1),
     ("tabn", "decay", -0.1), ("jump_diffusion_ttn", "n_mc", 0)],
)
def test_bad_hyperparameters_are_rejected(name, key, value):
    with pytest.raises(ValueError, match=f"{key}={value!r}"):
        create_regularizer(name, **{key: value})


# ---------------------------------------------------------------- naive dropout


def test_naive_drift_dropout_fraction_and_scaling():
    p = 0.3
    reg = create_regularizer("naive_dropout_drift", p=p)
    layer = reg.field_layer(50)
    state = torch.get_rng_state()
    reg.draw(spec(2000, 8))
    assert torch.equal(torch.get_rng_state(), state), "masks must come from the pass generator, not the global RNG"
    y = layer(torch.tensor(0.3), torch.ones(2000, 50))
    dropped = int((y == 0).sum())
    assert within_se(dropped, y.numel(), p)
    torch.testing.assert_close(y[y != 0], torch.full_like(y[y != 0], 1 / (1 - p)))
    layer.eval()
    x = torch.randn(4, 50)
    assert torch.equal(layer(torch.tensor(0.3), x), x)


@pytest.mark.parametrize("method", ["euler", "rk4"])
def test_naive_drift_mask_constant_within_a_pass(method):
    reg = create_regularizer("naive_dropout_drift", p=0.5)
    field = FieldMLP(6, 16, 6, num_layers=2, norm=reg.field_layer)
    masks: list[tuple[float, torch.Tensor]] = []
    for layer in field.norms:
        layer.register_forward_hook(lambda m, args, out: masks.append((float(args[0]), out / args[1])))

    def run(seed: int) -> list[tuple[float, torch.Tensor]]:
        masks.clear()
        rng = TrialRNG.from_seed(seed)
        integrate(field, torch.randn(32, 6), torch.linspace(0, 1, 5), solver=SolverConfig(method), rng=rng,
                  regularizer=reg)
        return list(masks)

    first = run(0)
    times = {t for t, _ in first}
    assert len(times) >= 4
    per_layer = [first[0::2], first[1::2]]
    for seen in per_layer:
        for _, mask in seen[1:]:
            assert torch.equal(mask, seen[0][1])
    assert set(per_layer[0][0][1].unique().tolist()) == {0.0, 2.0}
    assert not torch.equal(run(1)[0][1], first[0][1]), "a new pass draws a new mask"


def test_naive_head_dropout_sets_head_rate():
    times = torch.linspace(0, 1, 5)
    reg = create_regularizer("naive_dropout_head", p=0.4)
    model = create_model("neural_ode", DataSpec(2, 3, times=times), regularizer=reg)
    baseline = create_model("neural_ode", DataSpec(2, 3, times=times))
    rates = [m.p for m in model.head.modules() if isinstance(m, nn.Dropout)]
    assert rates == [0.4]
    assert [m.p for m in baseline.head.modules() if isinstance(m, nn.Dropout)] == [0.1]


# ---------------------------------------------------------------- jump diffusion


def test_jump_frequency_per_step_matches_rate_dt():
    grid = torch.tensor([0.0, 0.1, 0.4, 1.0])
    rate = 0.5
    state = torch.get_rng_state()
    jumps = sample_jumps(spec(400, 50, grid=grid), rate, 1.0)
    assert torch.equal(torch.get_rng_state(), state), "jumps come from the pass generator, not the global RNG"
    assert jumps.signs.shape == (3, 400, 50)
    n = 400 * 50
    for k, dt in enumerate((0.1, 0.3, 0.6)):
        signs = jumps.signs[k]
        assert within_se(int((signs != 0).sum()), n, rate * dt), k
        jumped = int((signs != 0).sum())
        assert within_se(int((signs == 1).sum()), jumped, 0.5), "Rademacher sign"


def test_jump_on_euler_step_makes_units_zero_or_double():
    rate, dt = 2.0, 0.25
    reg = create_regularizer("jump_diffusion", rate=rate)
    z0 = torch.rand(500, 8) + 0.5
    z1 = solve(Zero(), z0, torch.tensor([0.0, dt]), reg)
    ratio = z1 / z0
    assert set(ratio.unique().tolist()) == {0.0, 1.0, 2.0}
    assert within_se(int((ratio != 1).sum()), z0.numel(), rate * dt)
    reg.eval()
    z_eval = solve(Zero(), z0, torch.tensor([0.0, dt]), reg)
    assert torch.equal(z_eval, z0), "jump diffusion is off at test time"


def test_per_step_drop_frequency_is_p_at_every_step_whatever_its_length():
    """``scale: per_step`` (App. G.1's discrete form): each unit's increment is dropped with probability p
    at each step, unequal steps included; counts within 4 standard errors of p."""
    grid = torch.tensor([0.0, 0.01, 0.4, 1.0, 3.0])
    p, n = 0.3, 300 * 40
    drops = sample_drops(spec(300, 40, grid=grid), p)
    assert drops.keep.shape == (4, 300, 40) and set(drops.keep.unique().tolist()) == {0.0, 1.0}
    for k in range(4):
        assert within_se(int((drops.keep[k] == 0).sum()), n, p, k=4.0), k


def test_per_step_drop_on_euler_keeps_or_removes_the_whole_increment():
    reg = create_regularizer("jump_diffusion", rate=0.4, scale="per_step")
    z0 = torch.zeros(600, 10)
    z1 = solve(One(), z0, torch.tensor([0.0, 0.5]), reg)
    assert set(z1.unique().tolist()) == {0.0, 0.5}
    assert within_se(int((z1 == 0).sum()), z1.numel(), 0.4, k=4.0)
    with pytest.raises(ValueError, match="rate=2.0 is a per-step drop probability"):
        create_regularizer("jump_diffusion", rate=2.0, scale="per_step")
    with pytest.raises(ValueError, match="scale='poisson' must be one of rate, per_step"):
        create_regularizer("jump_diffusion", scale="poisson")
    assert reg.describe()["scale"] == "per_step" and reg.describe()["size"] == 1.0


def test_jump_ttn_stays_on_at_test_time():
    reg = create_regularizer("jump_diffusion_ttn", rate=2.0, n_mc=3)
    reg.eval()
    z0 = torch.rand(200, 4) + 0.5
    z1 = solve(Zero(), z0, torch.tensor([0.0, 0.25]), reg)
    assert not torch.equal(z1, z0)
    times = torch.linspace(0, 1, 5)
    model = create_model("neural_ode", DataSpec(2, 3, times=times), regularizer=reg)
    assert model.n_mc() == 3



@pytest.mark.parametrize("name", list_regularizers())
def test_the_test_protocol_is_declared_by_the_class(name):
    params = {"n_mc": 4} if "n_mc" in regularizer_info(name).hyperparams else {}
    reg = create_regularizer(name, **params)
    assert "test_time" not in vars(reg), "test_time is a class fact, never set per instance"
    assert reg.n_mc == params.get("n_mc", Regularizer.n_mc) and Regularizer.n_mc == 1

def test_jump_needs_fixed_step_solver():
    reg = create_regularizer("jump_diffusion")
    with pytest.raises(ValueError, match="fixed-step"):
        solve(Zero(), torch.ones(2, 3), torch.linspace(0, 1, 4), reg, method="dopri5")
    with pytest.raises(ValueError, match="exceeds 1"):
        sample_jumps(spec(2, 3, grid=torch.tensor([0.0, 4.0])), 0.5, 1.0)
    raw = {"study": "s", "models": ["neural_ode"], "datasets": ["synthetic"], "regularizers": ["jump_diffusion"],
           "solver": {"method": "dopri5"}}
    with pytest.raises(ConfigError, match="fixed-step"):
        parse_spec(raw)


def _refused(reg: str) -> set[str]:
    return {model for model in list_models() if regularizer_info(reg).incompatible(model_info(model))}


def test_incompatible_pairs_follow_the_model_properties_and_are_rejected():
    sde = {"neural_sde", "neural_lsde", "neural_lnsde", "neural_gsde",
           "image_nsde_additive", "image_nsde_multiplicative"}
    assert _refused("jump_diffusion") == _refused("jump_diffusion_ttn") == sde
    assert _refused("tabn") == _refused("naive_dropout_drift") == {"gru_ode"}
    assert _refused("continuum_dropout") == _refused("none") == set()
    pairs = [(reg, model) for reg in list_regularizers() for model in sorted(_refused(reg))]
    for reg, model in pairs:
        dataset = "synthetic" if model_info(model).input_kind == "timeseries" else "cifar10"
        reason = regularizer_info(reg).incompatible(model_info(model))
        with pytest.raises(ConfigError, match=re.escape(f"regularizer {reg!r} cannot be used with model {model!r}: "
                                                        f"{reason}")):
            parse_spec({"study": "s", "models": [model], "datasets": [dataset], "regularizers": [reg]})


def test_a_new_model_is_judged_by_its_declared_properties():
    """A model registered after the regularizers (a plugin's SDE, a field without hidden layers) is covered by
    their predicates with no edit in regularizers/."""
    new_sde = dataclasses.replace(model_info("neural_cde"), name="my_sde", family="sde")
    assert "Appendix G" in regularizer_info("jump_diffusion").incompatible(new_sde)
    assert regularizer_info("continuum_dropout").incompatible(new_sde) is None
    plain = dataclasses.replace(model_info("neural_cde"), name="my_rnn", field_layers=False)
    assert "for TA-BN to act on" in regularizer_info("tabn").incompatible(plain)
    assert "for drift dropout to act on" in regularizer_info("naive_dropout_drift").incompatible(plain)
    assert regularizer_info("jump_diffusion").incompatible(plain) is None


@pytest.mark.parametrize("name", ["continuum_dropout", "jump_diffusion_ttn"])
def test_n_mc_true_is_refused_alike(name):
    with pytest.raises(ValueError, match=rf"regularizer '{name}': n_mc=True must be an integer >= 1"):
        create_regularizer(name, n_mc=True)
    raw = {"study": "s", "models": ["neural_ode"], "datasets": ["synthetic"], "regularizers": {name: {"n_mc": True}}}
    with pytest.raises(ConfigError, match=rf"regularizers.{name}.n_mc=True must be"):
        parse_spec(raw)


# ---------------------------------------------------------------- STEER


def test_steer_end_times_uniform_around_T():
    b, t0, t1 = 0.5, 0.0, 2.0
    reg = create_regularizer("steer", b=b)
    s = spec(1, 1, t0=t0, t1=t1)
    ends = torch.tensor([reg.end_time(reg.draw(s), t0, t1) for _ in range(4000)], dtype=torch.float64)
    half = b * (t1 - t0)
    assert float(ends.min()) >= t1 - half and float(ends.max()) <= t1 + half
    assert float(ends.min()) < t1 - 0.95 * half and float(ends.max()) > t1 + 0.95 * half
    se = half / math.sqrt(3) / math.sqrt(ends.numel())
    assert abs(float(ends.mean()) - t1) <= 5 * se


def test_steer_integrates_to_drawn_end_in_training_and_T_in_eval():
    reg = create_regularizer("steer", b=0.75)
    times = torch.linspace(0, 1, 11)
    z0 = torch.zeros(3, 2)
    for seed in range(5):
        expected = reg.draw(spec(3, 2, seed=seed))
        rng = TrialRNG(torch.Generator().manual_seed(seed), torch.Generator().manual_seed(99), torch.Generator())
        z = integrate(One(), z0, times, solver=SolverConfig("euler"), rng=rng, regularizer=reg)
        torch.testing.assert_close(z, torch.full_like(z0, expected))
    reg.eval()
    z = solve(One(), z0, times, reg)
    torch.testing.assert_close(z, torch.ones_like(z0))


def test_moved_end_time_keeps_the_step_grid():
    times = torch.linspace(0, 1, 11, dtype=torch.float64)
    torch.testing.assert_close(moved_times(times, 0.55),
                               torch.cat([times[:6], torch.tensor([0.55], dtype=torch.float64)]))
    extended = moved_times(times, 1.23)
    torch.testing.assert_close(extended[-4:], torch.tensor([1.0, 1.1, 1.2, 1.23], dtype=torch.float64))
    assert extended.numel() == 14


class MatrixField(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(3, 6)

    def forward(self, t: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.linear(z)).view(-1, 3, 2)


class FixedEnd(Regularizer):
    def draw(self, spec):
        return spec.t1 + 0.4

    def end_time(self, draw, t0, t1):
        return draw


def test_control_is_held_at_X_T_beyond_T():
    torch.manual_seed(0)
    times = torch.linspace(0, 1, 6)
    coeffs = torchcde.hermite_cubic_coefficients_with_backward_differences(torch.randn(4, 6, 2), t=times)
    X = torchcde.CubicSpline(coeffs, t=times)
    assert X.derivative(torch.tensor(1.2)).abs().sum() > 0, "the spline extrapolates past T"
    field = MatrixField()
    z0 = torch.randn(4, 3)
    plain = solve(field, z0, times, control=X)
    moved = solve(field, z0, times, FixedEnd(), control=X)
    torch.testing.assert_close(moved, plain)


# ---------------------------------------------------------------- TA-BN


def node_weights(t: float, t0: float, t1: float, bins: int) -> torch.Tensor:
    k, w = bin_weights(t, t0, t1, bins)
    weights = torch.zeros(bins, dtype=torch.float64)
    weights[k] += 1 - w
    weights[k + 1] += w
    return weights


@pytest.mark.parametrize("t0, t1, bins", [(0.0, 1.0, 10), (2.0, 160.0, 50), (-1.0, 3.0, 2)])
def test_tabn_interpolation_weights_exact_at_nodes_and_midpoints(t0, t1, bins):
    h = (t1 - t0) / (bins - 1)
    eye = torch.eye(bins, dtype=torch.float64)
    for k in range(bins):
        torch.testing.assert_close(node_weights(t0 + k * h, t0, t1, bins), eye[k], atol=1e-12, rtol=0)
    for k in range(bins - 1):
        for share in (0.5, 0.25, 0.9):  # midpoint, then the lower node must get the larger weight
            expected = (1 - share) * eye[k] + share * eye[k + 1]
            torch.testing.assert_close(node_weights(t0 + (k + share) * h, t0, t1, bins), expected, atol=1e-12, rtol=0)
    torch.testing.assert_close(node_weights(t1 + 5 * h, t0, t1, bins), eye[-1])
    torch.testing.assert_close(node_weights(t0 - 5 * h, t0, t1, bins), eye[0])


def test_tabn_training_uses_batch_statistics_and_updates_neighbour_nodes():
    torch.manual_seed(0)
    layer = TemporalBatchNorm(4, bins=5)
    layer.cover(0.0, 1.0)
    x = torch.randn(64, 4) * 2 + 3
    y = layer(torch.tensor(0.5), x)
    expected = (x - x.mean(0)) / torch.sqrt(x.var(0, unbiased=False) + layer.eps)
    torch.testing.assert_close(y, expected)
    torch.testing.assert_close(layer.running_mean[2], 0.1 * x.mean(0))
    torch.testing.assert_close(layer.running_var[2], 0.9 + 0.1 * x.var(0))
    untouched = [0, 1, 3, 4]
    assert torch.equal(layer.running_mean[untouched], torch.zeros(4, 4))
    layer(torch.tensor(0.625), x)  # halfway between nodes 2 and 3
    torch.testing.assert_close(layer.running_mean[3], 0.05 * x.mean(0))
    torch.testing.assert_close(layer.running_mean[2], 0.95 * 0.1 * x.mean(0) + 0.05 * x.mean(0))
    fresh = TemporalBatchNorm(4, bins=5)
    fresh.cover(0.0, 1.0)
    fresh(torch.tensor(0.5625), x)  # a quarter of the way from node 2 (t=0.5) to node 3 (t=0.75)
    torch.testing.assert_close(fresh.running_mean[2], 0.075 * x.mean(0))
    torch.testing.assert_close(fresh.running_mean[3], 0.025 * x.mean(0))


def test_tabn_eval_uses_running_statistics():
    torch.manual_seed(0)
    layer = TemporalBatchNorm(3, bins=3)
    layer.cover(0.0, 2.0)
    with torch.no_grad():
        layer.running_mean.copy_(torch.tensor([[0.0] * 3, [1.0] * 3, [3.0] * 3]))
        layer.running_var.copy_(torch.tensor([[1.0] * 3, [4.0] * 3, [16.0] * 3]))
        layer.weight.copy_(torch.tensor([[1.0] * 3, [2.0] * 3, [4.0] * 3]))
        layer.bias.copy_(torch.tensor([[0.0] * 3, [1.0] * 3, [-1.0] * 3]))
    layer.eval()
    x = torch.randn(8, 3)
    y = layer(torch.tensor(1.5), x)  # midway between nodes 1 (t=1) and 2 (t=2)
    torch.testing.assert_close(y, (x - 2.0) / torch.sqrt(torch.tensor(10.0 + layer.eps)) * 3.0 + 0.0)
    torch.testing.assert_close(layer(torch.tensor(1.5), x[:1]), y[:1]), "eval output must not depend on the batch"
    quarter = layer(torch.tensor(1.25), x)  # weights 0.75 on node 1, 0.25 on node 2
    torch.testing.assert_close(quarter, (x - 1.5) / torch.sqrt(torch.tensor(7.0 + layer.eps)) * 2.5 + 0.5)
    before = layer.running_mean.clone()
    layer(torch.tensor(0.5), x)
    assert torch.equal(layer.running_mean, before)


def test_tabn_state_dict_span_and_penalty():
    torch.manual_seed(0)
    times = torch.linspace(2.0, 6.0, 9)
    make = lambda: create_model(  # noqa: E731
        "neural_ode", DataSpec(2, 3, times=times), hidden_size=8, num_layers=2,
        regularizer=create_regularizer("tabn", bins=10, decay=0.1),
    )
    model = make()
    keys = model.state_dict().keys()
    for name in ("running_mean", "running_var", "span"):
        assert sum(k.startswith("field.") and k.endswith(name) for k in keys) == 2, name
    inputs = model.prepare(times, torch.randn(16, 9, 2))
    model.eval()
    with pytest.raises(RuntimeError, match="time span"):
        model(inputs, TrialRNG.from_seed(0))
    model.train()
    model(inputs, TrialRNG.from_seed(0))
    norm = model.field.net.norms[0]
    assert norm.span.tolist() == [2.0, 6.0]
    assert norm.running_mean.abs().sum() > 0
    fresh = make()
    fresh.load_state_dict(model.state_dict())
    model.eval()
    fresh.eval()
    torch.testing.assert_close(fresh(inputs, TrialRNG.from_seed(0)), model(inputs, TrialRNG.from_seed(0)))
    with torch.no_grad():
        for norm in model.field.net.norms:
            norm.weight.add_(torch.randn_like(norm.weight))
            norm.bias.add_(torch.randn_like(norm.bias))
    reference = sum(
        F.mse_loss(w, torch.ones_like(w)) + F.mse_loss(b, torch.zeros_like(b))
        for norm in model.field.net.norms for w, b in zip(norm.weight, norm.bias, strict=True)
    )
    torch.testing.assert_close(model.penalty(), 0.1 * reference)
    assert float(create_regularizer("tabn", decay=0.0).penalty()) == 0.0


# ---------------------------------------------------------------- every regularizer on every compatible model


def _pairs() -> list[tuple[str, str]]:
    return [
        (reg, model) for reg in list_regularizers() for model in list_models()
        if regularizer_info(reg).incompatible(model_info(model)) is None
    ]


def _build(model_name: str, reg: Regularizer) -> tuple[nn.Module, torch.Tensor]:
    if model_info(model_name).input_kind == "image":
        model = create_model(
            model_name, DataSpec(3, 3, image_size=(8, 8)), hidden_size=8, depth=1.0, regularizer=reg,
            solver=SolverConfig("euler", step_size=0.25),
        )
        return model, model.prepare(None, torch.randn(4, 3, 8, 8))
    times = torch.linspace(0, 1, 6)
    model = create_model(model_name, DataSpec(2, 3, times=times), hidden_size=8, regularizer=reg)
    return model, model.prepare(times, torch.randn(4, 6, 2))


@pytest.mark.parametrize("reg_name, model_name", _pairs())
def test_forward_backward_and_test_protocol(reg_name, model_name):
    torch.manual_seed(0)
    reg = create_regularizer(reg_name)
    model, inputs = _build(model_name, reg)
    model.train()
    rng = TrialRNG.from_seed(0)
    logits = model(inputs, rng)
    loss = F.cross_entropy(logits, torch.randint(0, 3, (4,))) + model.penalty()
    loss.backward()
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    assert grads and all(torch.isfinite(g).all() for g in grads)
    body = [p.grad for name, p in model.named_parameters() if not name.startswith("head.")]
    assert any(g is not None and g.abs().sum() > 0 for g in body), "gradients reach the encoder and the dynamics"
    model.eval()
    rng = TrialRNG.from_seed(1)
    state = rng.regularizer.get_state()
    prediction = model.predict(inputs, rng)
    torch.testing.assert_close(prediction.probs.sum(-1), torch.ones(4))
    drew = not torch.equal(rng.regularizer.get_state(), state)
    assert drew == (reg.test_time == "mc"), "only regularizers kept on at test time draw in eval mode"
