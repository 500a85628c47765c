"""The model zoo: every registered model on small synthetic inputs of its kind, plus per-model properties."""
from __future__ import annotations

import math
import sys

import pytest
import torch
import torch.nn.functional as F
from ndebench.datasets.registry import create_dataset
from ndebench.models import integrate as integrate_module
from ndebench.models.base import DataSpec, index_batch
from ndebench.models.integrate import SolverConfig, TrialRNG, begin_pass, pass_grid
from ndebench.models.registry import create_model, list_models, model_info, model_options
from ndebench.regularizers.base import PassSpec
from ndebench.regularizers.continuum_dropout import ContinuumDropout
from ndebench.regularizers.registry import create_regularizer

MODELS = list_models()
TIMESERIES = [name for name in MODELS if model_info(name).input_kind == "timeseries"]
IMAGE = [name for name in MODELS if model_info(name).input_kind == "image"]
# multiples of 1/8: the observation grid and the SDE step grid coincide exactly
TIMES = torch.arange(9, dtype=torch.float32) / 8
CHANNELS, CLASSES = 3, 5


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    # the CI machine has 2 cores shared with other jobs; intra-op threads then mostly wait on each other
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def make(name: str, regularizer=None, *, binary: bool = False, static_channels: int = 0, **kwargs):
    """A small model with parameters that depend only on the seed (regularizers here have no parameters)."""
    torch.manual_seed(0)
    if model_info(name).input_kind == "image":
        return create_model(name, DataSpec(3, CLASSES, binary, image_size=(32, 32)), hidden_size=16, width=8,
                            regularizer=regularizer, **kwargs)
    return create_model(name, DataSpec(CHANNELS, CLASSES, binary, times=TIMES, static_channels=static_channels),
                        hidden_size=8, regularizer=regularizer, **kwargs)


def data(name: str, model, static: torch.Tensor | None = None):
    generator = torch.Generator().manual_seed(1)
    if model_info(name).input_kind == "image":
        return model.prepare(None, torch.randn(2, 3, 32, 32, generator=generator))
    values = torch.randn(4, TIMES.numel(), CHANNELS, generator=generator)
    values[torch.rand(values.shape, generator=generator) < 0.2] = float("nan")
    values[:, 0] = torch.randn(4, CHANNELS, generator=generator)
    return model.prepare(TIMES, values, static)


def dropout():
    return create_regularizer("continuum_dropout", p=0.5, m=5)


class ForcedOn(ContinuumDropout):
    """Continuum Dropout with every component's mask held at 1 (exactly, not as a limit of small p)."""

    def draw(self, spec: PassSpec):
        draw = super().draw(spec)
        draw.step_masks = torch.ones_like(draw.step_masks)
        return draw


class ForcedOff(ContinuumDropout):
    """Continuum Dropout with every component paused at every step."""

    def draw(self, spec: PassSpec):
        draw = super().draw(spec)
        draw.step_masks = torch.zeros_like(draw.step_masks)
        return draw


def logits(model, inputs, seed: int = 0) -> torch.Tensor:
    model.eval()
    with torch.no_grad():
        return model(inputs, TrialRNG.from_seed(seed))


# ---------------------------------------------------------------- every model


def test_registry_lists_the_paper_models_with_summaries_and_papers():
    expected = {
        "neural_ode", "neural_sde", "gru_ode", "ode_rnn", "neural_cde", "ancde", "neural_lsde", "neural_lnsde",
        "neural_gsde", "image_node", "image_nsde_additive", "image_nsde_multiplicative",
    }
    assert expected <= set(MODELS)
    assert set(IMAGE) == {"image_node", "image_nsde_additive", "image_nsde_multiplicative"}
    for name in MODELS:
        info = model_info(name)
        assert info.summary and "\n" not in info.summary and info.paper


@pytest.mark.parametrize("binary", [False, True])
@pytest.mark.parametrize("name", MODELS)
def test_forward_backward_finite_with_right_shape(name, binary):
    model = make(name, binary=binary)
    inputs = data(name, model)
    model.train()
    out = model(inputs, TrialRNG.from_seed(0))
    batch = 2 if name in IMAGE else 4
    assert out.shape == (batch, 1 if binary else CLASSES)
    assert torch.isfinite(out).all()
    out.square().sum().backward()
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    assert all(torch.isfinite(g).all() for g in grads)
    dynamics = [p.grad for n, p in model.named_parameters() if not n.startswith("head")]
    assert any(g is not None and g.abs().sum() > 0 for g in dynamics)


@pytest.mark.parametrize("name", MODELS)
def test_continuum_dropout_changes_the_output(name):
    plain = make(name)
    regularized = make(name, dropout())
    inputs = data(name, plain)
    assert not torch.equal(logits(plain, inputs), logits(regularized, inputs))


@pytest.mark.parametrize("name", MODELS)
def test_mask_forced_on_equals_the_unregularized_model(name):
    plain = make(name)
    forced = make(name, ForcedOn(p=0.5, m=5))
    inputs = data(name, plain)
    assert torch.equal(logits(plain, inputs), logits(forced, inputs))


@pytest.mark.parametrize("name", MODELS)
def test_same_seed_same_output(name):
    model = make(name, dropout())
    inputs = data(name, model)
    assert torch.equal(logits(model, inputs, seed=3), logits(model, inputs, seed=3))
    assert not torch.equal(logits(model, inputs, seed=3), logits(model, inputs, seed=4))


@pytest.mark.parametrize("name", MODELS)
def test_paused_components_do_not_move_over_a_step(name, monkeypatch):
    """Every solver step of every integrate call: components whose mask is 0 keep their value exactly.

    The model's ``integrate`` is replaced by one that solves the same problem with the same draw but
    returns the state at every step of the solver's grid, so each step's increment can be checked. Image
    models step by 1/8 here: torchsde accumulates its step times, and only with a binary step do its
    steps end exactly on the grid at which the states are read.
    """
    real = integrate_module.integrate
    steps = []

    def stepwise(drift, z0, times, *, solver, rng, regularizer=None, draw=None, regularized=None, **kwargs):
        kind = "sde" if kwargs.get("diffusion") is not None else "ode"
        if draw is None:
            draw = begin_pass(regularizer, z0, times, solver=solver, rng=rng, kind=kind, regularized=regularized)
        grid = pass_grid(times, solver, kind)
        path = real(
            drift, z0, grid, solver=solver, rng=rng, regularizer=regularizer, draw=draw, regularized=regularized,
            **{**kwargs, "output": "times"},
        )
        steps.append((grid, path, draw, slice(None) if regularized is None else regularized))
        return path[-1]

    exact_steps = {"solver": SolverConfig("euler", step_size=0.125)} if name in IMAGE else {}
    model = make(name, dropout(), **exact_steps)
    for module in ("ndebench.models.base", type(model).__module__):  # TimeSeriesNDE.solve, or the model's own calls
        if hasattr(sys.modules[module], "integrate"):
            monkeypatch.setattr(f"{module}.integrate", stepwise)
    logits(model, data(name, model))
    paused = moved = 0
    for grid, path, draw, part in steps:
        for k in range(grid.numel() - 1):
            off = draw.mask(grid[k]) == 0
            before, after = path[k][..., part], path[k + 1][..., part]
            assert torch.equal(after[off], before[off]), f"step {k}: a paused component moved"
            paused += int(off.sum())
            moved += int((after[~off] != before[~off]).sum())
    assert paused > 0 and moved > 0


def test_unknown_solver_method_is_refused_when_the_config_is_built():
    with pytest.raises(ValueError, match=r"method='rk45' is not a solver; valid: euler, .*dopri5.*milstein"):
        SolverConfig(method="rk45")
    with pytest.raises(ValueError, match=r"step_size=0 must be > 0"):
        SolverConfig(step_size=0)
    with pytest.raises(ValueError, match=r"adjoint=True: method 'srk' has no adjoint"):
        SolverConfig("srk", adjoint=True)


@pytest.mark.parametrize("name", MODELS)
def test_a_solver_of_the_wrong_kind_is_refused_when_the_model_is_built(name):
    sde = model_info(name).family == "sde"
    wrong, valid = ("dopri5", "euler, milstein, srk") if sde else ("milstein", "euler, midpoint")
    with pytest.raises(ValueError, match=f"solver method '{wrong}' does not solve (O|C|S)DEs; valid: {valid}"):
        make(name, solver=SolverConfig(method=wrong))


def test_families_and_field_layers_are_declared():
    families = {name: model_info(name).family for name in MODELS}
    assert {name for name, family in families.items() if family == "sde"} >= {
        "neural_sde", "neural_lsde", "neural_lnsde", "neural_gsde", "image_nsde_additive", "image_nsde_multiplicative"}
    assert families["neural_cde"] == families["ancde"] == "cde"
    assert families["neural_ode"] == families["ode_rnn"] == families["gru_ode"] == families["image_node"] == "ode"
    assert [name for name in MODELS if not model_info(name).field_layers] == ["gru_ode"]
    assert model_info("gru_ode").default_solver == SolverConfig("rk4", adjoint=True)


def test_hyperparameters_are_the_keyword_only_parameters():
    assert set(model_options("neural_ode")) == {"hidden_size", "num_layers"}
    assert set(model_options("neural_cde")) == {"hidden_size", "num_layers", "interpolation"}
    assert set(model_options("ancde")) == {"hidden_size", "num_layers", "interpolation", "attention_size",
                                           "attention_hidden_size", "timewise", "mask_attention"}
    assert set(model_options("image_node")) == {"hidden_size", "num_layers", "width", "depth"}
    assert model_options("neural_sde")["interpolation"].default == "hermite"
    assert model_options("ode_rnn")["intensity"].annotation is bool
    with pytest.raises(ValueError, match=r"model 'neural_cde' has no hyperparameter\(s\) \['hiden_size'\]; valid: "):
        make("neural_cde", hiden_size=4)


def test_a_model_needs_data_of_its_kind():
    with pytest.raises(ValueError, match="NeuralCDE is a time-series model: its DataSpec needs the observation times"):
        create_model("neural_cde", DataSpec(3, 2, image_size=(8, 8)))
    with pytest.raises(ValueError, match=r"ImageNODE is an image model: its DataSpec needs the image size \(H, W\)"):
        create_model("image_node", DataSpec(3, 2, times=TIMES))


def test_register_model_takes_the_family_of_a_registered_parent(monkeypatch):
    from ndebench.models import registry
    from ndebench.models.neural_cde import NeuralCDE
    from ndebench.models.snsde import SNSDEClassifier
    from ndebench.platform.common.registry import Registry

    monkeypatch.setattr(registry, "REGISTRY", Registry("model"))

    @registry.register_model("my_cde", summary="s", paper="p")
    class MyCDE(NeuralCDE):
        pass

    assert registry.REGISTRY.info("my_cde").family == "cde" and registry.REGISTRY.info("my_cde").field_layers
    with pytest.raises(ValueError, match=r"model 'my_sde': declare its family, .* one of ode, cde, sde"):
        registry.register_model("my_sde", summary="s", paper="p")(type("MySDE", (SNSDEClassifier,), {}))
    assert "my_sde" not in registry.REGISTRY


# ---------------------------------------------------------------- time-series models


@pytest.mark.parametrize("name", TIMESERIES)
def test_static_features_enter_the_initial_state(name):
    model = make(name, static_channels=2)
    static = torch.randn(4, 2, generator=torch.Generator().manual_seed(2))
    inputs = data(name, model, static)
    assert isinstance(inputs, tuple) and torch.equal(inputs[1], static)
    assert index_batch(inputs, slice(0, 2))[1].shape == (2, 2)
    shifted = data(name, model, static + 1.0)
    assert not torch.equal(logits(model, inputs), logits(model, shifted))
    with pytest.raises(ValueError, match=r"expected static features of shape \(4, 2\)"):
        data(name, model)
    with pytest.raises(ValueError, match="static_channels=0"):
        data(name, make(name), static)


def test_ode_rnn_draws_one_process_per_pass(monkeypatch):
    regularizer = dropout()
    specs = []
    real_draw = regularizer.draw
    monkeypatch.setattr(regularizer, "draw", lambda spec: specs.append(spec) or real_draw(spec))
    draws = []
    real = integrate_module.integrate
    monkeypatch.setattr("ndebench.models.ode_rnn.integrate", lambda *a, **k: draws.append(k["draw"]) or real(*a, **k))
    model = make("ode_rnn", regularizer)
    logits(model, data("ode_rnn", model))
    assert len(specs) == 1 and (specs[0].t0, specs[0].t1) == (0.0, 1.0) and torch.equal(specs[0].grid, TIMES)
    assert len(draws) == TIMES.numel() - 1 and all(d is draws[0] for d in draws)


def test_ode_rnn_gru_jumps_are_not_masked(monkeypatch):
    """With every component paused the ODE segments are the identity, yet the GRU still updates h."""
    states = []
    real = integrate_module.integrate
    monkeypatch.setattr("ndebench.models.ode_rnn.integrate",
                        lambda f, z, t, **k: states.append((z, real(f, z, t, **k))) or states[-1][1])
    model = make("ode_rnn", ForcedOff(p=0.5, m=5))
    model.eval()
    with torch.no_grad():
        h = model.latent(data("ode_rnn", model), TrialRNG.from_seed(0))
    assert all(torch.equal(before, after) for before, after in states)
    assert h.abs().sum() > 0


@pytest.mark.parametrize("seed", [0, 1])  # T' = 1.47 and 0.56
def test_ode_rnn_follows_a_moved_end_time(seed, monkeypatch):
    regularizer = create_regularizer("steer", b=0.5)
    ends = []
    real_end = regularizer.end_time
    monkeypatch.setattr(regularizer, "end_time", lambda *a: ends.append(real_end(*a)) or ends[-1])
    spans = []
    real = integrate_module.integrate
    monkeypatch.setattr("ndebench.models.ode_rnn.integrate", lambda f, z, t, **k: spans.append(t) or real(f, z, t, **k))
    model = make("ode_rnn", regularizer)
    model.train()
    model(data("ode_rnn", model), TrialRNG.from_seed(seed))
    (end,) = ends
    starts = [float(span[0]) for span in spans]
    assert starts == sorted(starts) and all(float(span[1]) > float(span[0]) for span in spans)
    assert float(spans[-1][-1]) == pytest.approx(end)
    assert (len(spans) > TIMES.numel() - 1) == (end > 1.0)


@pytest.mark.parametrize("mask_attention, size", [(False, 8), (True, CHANNELS + 1 + 8)])
def test_ancde_regularizes_the_main_cde_unless_asked(mask_attention, size, monkeypatch):
    regularizer = dropout()
    sizes = []
    real_draw = regularizer.draw
    monkeypatch.setattr(regularizer, "draw", lambda spec: sizes.append(spec.latent_size) or real_draw(spec))
    model = make("ancde", regularizer, mask_attention=mask_attention)
    logits(model, data("ancde", model))
    assert sizes == [size]


def test_gru_ode_has_no_hidden_layers():
    with pytest.raises(ValueError, match="num_layers=2"):
        make("gru_ode", num_layers=2)


def test_snsde_diffusion_and_drift_forms():
    t, z = torch.tensor(0.3), torch.randn(5, 8)
    lsde, lnsde, gsde, naive = (make(n) for n in ("neural_lsde", "neural_lnsde", "neural_gsde", "neural_sde"))
    torch.testing.assert_close(lsde.diffusion(t, z), lsde.diffusion(t, 2 * z))
    assert torch.equal(lnsde.diffusion(t, torch.zeros(5, 8)), torch.zeros(5, 8))
    assert not torch.equal(naive.diffusion(t, z), naive.diffusion(t, 2 * z))
    x = torch.randn(5, CHANNELS + 1)
    assert torch.equal(gsde.drift(t, torch.zeros(5, 8), x), torch.zeros(5, 8))
    for model in (lsde, lnsde, gsde, naive):
        assert model.diffusion(t, 50 * z).abs().max() <= 1 and model.drift(t, 50 * z, x).abs().max() <= 1


@pytest.fixture(scope="module")
def basic_motions():
    return create_dataset("uea/BasicMotions", seed=0)


@pytest.mark.parametrize("name", TIMESERIES)
def test_trains_above_chance_on_basic_motions(name, basic_motions):
    """Full-batch Adam on BasicMotions' training split, every 4th time point, Euler without adjoint.

    Chance accuracy is 1/4; passing needs 4.5 binomial standard errors above it.
    """
    bundle = basic_motions
    times, values, targets = bundle.times[::4].contiguous(), bundle.train.values[:, ::4], bundle.train.targets
    n, chance = len(targets), 1.0 / bundle.num_classes
    threshold = chance + 4.5 * math.sqrt(chance * (1 - chance) / n)
    torch.manual_seed(0)
    model = create_model(name, DataSpec(bundle.channels, bundle.num_classes, times=times), solver=SolverConfig("euler"))
    inputs = model.prepare(times, values, bundle.train.static)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    rng = TrialRNG.from_seed(0)
    accuracy = 0.0
    for epoch in range(1, 81):
        model.train()
        loss = F.cross_entropy(model(inputs, rng), targets)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if epoch % 10 == 0:
            model.eval()
            accuracy = float((model.predict(inputs, rng).logits.argmax(-1) == targets).float().mean())
            if accuracy > threshold:
                break
    assert accuracy > threshold, f"training accuracy {accuracy:.3f} after {epoch} epochs"


# ---------------------------------------------------------------- image models

PAPER_SIZES = {  # Appendix D.3, millions of parameters for 10 and 100 classes
    "image_node": {10: 10.49e6, 100: 10.59e6},
    "image_nsde_additive": {10: 12.59e6, 100: 12.69e6},
    "image_nsde_multiplicative": {10: 12.59e6, 100: 12.69e6},
}


def parameter_count(name: str, classes: int, **kwargs) -> int:
    return sum(p.numel()
               for p in create_model(name, DataSpec(3, classes, image_size=(32, 32)), **kwargs).parameters())


@pytest.mark.parametrize("name", IMAGE)
def test_image_models_have_the_paper_sizes(name):
    """Default extractor (width 64): +1.2% over App. D.3's counts (docs/differences.md); width 63: within 0.5%."""
    for classes, size in PAPER_SIZES[name].items():
        count = parameter_count(name, classes)
        assert 0.005 < count / size - 1 < 0.013, f"{count} parameters for {classes} classes vs {size:.0f}"
        assert abs(parameter_count(name, classes, width=63) / size - 1) < 0.005
    # The NDE and the classifier match the paper: +2.10M for the diffusion network, +0.09M for 90 classes.
    assert abs(parameter_count(name, 100) - parameter_count(name, 10) - 0.09225e6) < 1e3
    if name != "image_node":
        assert abs(parameter_count(name, 10) - parameter_count("image_node", 10) - 2.10e6) < 0.005e6
    model = create_model(name, DataSpec(3, 100, image_size=(32, 32)))
    assert not any(isinstance(m, torch.nn.Dropout) and m.p > 0 for m in model.modules())
    out = model(model.prepare(None, torch.randn(2, 3, 32, 32)), TrialRNG.from_seed(0))
    out.logsumexp(-1).sum().backward()
    assert out.shape == (2, 100) and all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)


def test_image_models_take_any_dataset_size_and_check_it():
    model = make("image_node")
    with pytest.raises(ValueError, match=r"\(N, 3, 32, 32\)"):
        model.prepare(None, torch.randn(2, 3, 96, 96))
    stl = create_model("image_node", DataSpec(3, 10, image_size=(96, 96)), hidden_size=16, width=8)
    assert logits(stl, stl.prepare(None, torch.randn(2, 3, 96, 96))).shape == (2, 10)
