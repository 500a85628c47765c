"""The CUDA branches, each checked against the CPU with the same semantics: random words drawn on the device,
the grid sampler, the step lookup by time at exact grid times, the per-device regularizer generator, a whole
trial on the device. The ``cuda`` cases skip where torch finds no CUDA device (marker ``gpu``); mask
statistics on the device are the CPU tests of ``test_continuum_dropout.py`` run on it, the checkpoint resumed
on the device is ``test_checkpoint.py``'s, and captured CUDA-graph solves against eager ones are
``test_graphs.py``'s. ``.ci/gpu/run.sh`` runs these cases on a GPU machine that has torch but neither Ray, Optuna
nor MLflow; the last test here runs them so on this machine."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from fakes import DEVICES
from ndebench.models.integrate import TrialRNG, resolved_device
from ndebench.regularizers.base import PassSpec
from ndebench.regularizers.continuum_dropout import random_words, sample_grid_states
from ndebench.regularizers.rates import solve_rates

CUDA = torch.device("cuda")


@pytest.mark.gpu
def test_random_words_stay_on_the_device_and_follow_the_seed():
    draw = [random_words(1 << 20, torch.Generator(device=CUDA).manual_seed(seed)) for seed in (0, 0, 1)]
    assert draw[0].device.type == "cuda" and draw[0].dtype == torch.int64 and draw[0].numel() == 1 << 20
    assert torch.equal(draw[0], draw[1]) and not torch.equal(draw[0], draw[2])


@pytest.mark.gpu
def test_grid_states_on_the_device_start_active_and_end_inactive_with_probability_p():
    rates = solve_rates(0.3, 10.0, 1.0)
    grid = torch.linspace(0, 1, 201)
    states = sample_grid_states(grid, 200, 200, rates, torch.Generator(device=CUDA).manual_seed(3))
    assert states.device.type == "cuda" and bool(states[0].all())
    assert abs(1 - states[-1].double().mean().item() - 0.3) < 0.01


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("grid_dtype", [torch.float32, torch.float64])
def test_step_index_at_a_grid_time_is_the_step_that_starts_there(device, grid_dtype):
    # A step holds its left endpoint's mask (App. G: Z(k+1) = Z(k) + gamma dt o I_k), so t == grid[k] is step k,
    # and a time inside [grid[k], grid[k+1]) is step k too, whatever the dtype of t or the device.
    grid = torch.linspace(0, 1, 11, dtype=grid_dtype, device=device)
    spec = PassSpec(1, 1, 0.0, 1.0, grid, torch.Generator(device=device), torch.device(device), torch.float32)
    for k in range(10):
        for t in (grid[k], (grid[k] + grid[k + 1]) / 2):
            assert int(spec.step_index(t)) == int(spec.step_index(t.double())) == k, (k, float(t))
    # 0.1 is grid[1] read in the grid's dtype: step 1 whether it comes as a float32 or a float64 tensor.
    assert grid[1] == torch.tensor(0.1, dtype=grid_dtype, device=device)
    for t_dtype in (torch.float32, torch.float64):
        assert int(spec.step_index(torch.tensor(0.1, dtype=t_dtype, device=device))) == 1, t_dtype


@pytest.mark.parametrize("device", DEVICES)
def test_step_index_by_time_agrees_on_the_host_and_the_device(device):
    grid = torch.linspace(0, 1, 11, device=device)
    host = PassSpec(1, 1, 0.0, 1.0, grid.cpu(), torch.Generator(), torch.device("cpu"), torch.float32)
    here = PassSpec(1, 1, 0.0, 1.0, grid, torch.Generator(device=device), torch.device(device), torch.float32)
    for t in torch.tensor([0.0, 0.05, 0.1, 0.3, 0.55, 0.7, 0.99, 1.0], dtype=torch.float64):
        assert int(here.step_index(t.to(device))) == int(host.step_index(t))


def test_a_device_named_without_an_index_is_the_current_one(monkeypatch):
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 1)
    assert resolved_device("cuda") == resolved_device(torch.device("cuda")) == torch.device("cuda", 1)
    assert resolved_device("cuda:0") == torch.device("cuda", 0)
    assert resolved_device(torch.device("cpu")) == resolved_device("cpu") == torch.device("cpu")


@pytest.mark.parametrize("device", DEVICES)
def test_the_regularizer_generator_per_device_is_derived_once_from_the_seed(device):
    first, again = TrialRNG.from_seed(5), TrialRNG.from_seed(5)
    generator = first.regularizer_on(torch.device(device))
    indexed = f"{device}:{torch.cuda.current_device()}" if device == "cuda" else device
    assert generator.device.type == device
    assert first.regularizer_on(device) is generator and first.regularizer_on(indexed) is generator
    assert len(first.state()["on_device"]) == (device != "cpu")
    assert torch.equal(torch.rand(4, generator=generator, device=device),
                       torch.rand(4, generator=again.regularizer_on(device), device=device))


@pytest.mark.gpu
@pytest.mark.parametrize("model,adjoint", [("neural_cde", False), ("neural_ode", False), ("neural_cde", True)])
def test_a_whole_trial_trains_validates_and_tests_on_the_device(model, adjoint):
    from ndebench.models.integrate import SolverConfig
    from ndebench.platform.spec.config import TrainingConfig
    from ndebench.platform.worker.loop import run_trial
    from ndebench.platform.worker.spec import TrialSpec

    spec = TrialSpec(model=model, dataset="synthetic", regularizer="continuum_dropout",
                     regularizer_params={"p": 0.3, "m": 10, "n_mc": 3}, model_params={"hidden_size": 8},
                     training=TrainingConfig(epochs=2, min_epochs=1, patience=2, lr=0.01),
                     solver=SolverConfig("euler", adjoint=adjoint), seed=1, device="cuda")
    epochs = []
    result = run_trial(spec, on_epoch=epochs.append)
    assert result.status == "ok" and len(epochs) == 2 and result.protocol["n_mc"] == 3
    assert 0.0 <= result.test["test_accuracy"] <= 1.0 and result.test["test_nll"] > 0
    assert all(t.device.type == "cuda" for t in result.weights.values() if torch.is_tensor(t))
    graph = result.protocol["graph"]
    assert graph.startswith("eager: the adjoint") if adjoint else graph == "captured"


@pytest.mark.gpu
def test_a_failed_capture_leaves_the_generator_and_the_capture_state_as_they_were():
    # A field that reads a value back to the host mid-solve: CUDA refuses that while a stream captures.
    from ndebench.models.graphs import CaptureError, GraphCache

    class ReadsBack(torch.nn.Module):
        def forward(self, t, z):
            return z * float(z.sum())

    torch.cuda.manual_seed(3)
    before = torch.cuda.get_rng_state()
    z0 = torch.randn(4, 3, device=CUDA, requires_grad=True)
    after_draw = torch.cuda.get_rng_state()
    with pytest.raises(CaptureError, match="capturing|capture"):
        GraphCache().solve(lambda draw, control: ReadsBack(), z0, [0.0, 0.5, 1.0], "euler", None)
    assert torch.equal(torch.cuda.get_rng_state(), after_draw) and not torch.equal(before, after_draw)
    dropped = torch.nn.functional.dropout(torch.ones(1000, device=CUDA), 0.5)
    assert 300 < int((dropped == 0).sum()) < 700


@pytest.mark.gpu
def test_a_captured_and_an_eager_trial_of_one_seed_end_with_the_same_metrics():
    # The captured solve sums the same steps as torchdiffeq's eager one, in another kernel order: float32
    # rounding, a few ulps a step (test_graphs.py bounds one pass at rtol 1e-4). Over a short training that
    # must leave the test metrics equal up to that rounding: NLL within 1e-3 relative; accuracy within 0.02 and
    # ECE within 0.01 (a sample or two of the synthetic test split near a class or bin boundary may move).
    from ndebench.models.integrate import SolverConfig
    from ndebench.platform.spec.config import TrainingConfig
    from ndebench.platform.worker.loop import run_trial
    from ndebench.platform.worker.spec import TrialSpec

    results = {}
    for setting in ("on", "off"):
        spec = TrialSpec(model="neural_cde", dataset="synthetic", regularizer="continuum_dropout",
                         regularizer_params={"p": 0.3, "m": 10}, model_params={"hidden_size": 16},
                         training=TrainingConfig(epochs=3, min_epochs=3, patience=3, lr=0.005),
                         solver=SolverConfig("euler", adjoint=False, cuda_graph=setting), seed=2, device="cuda")
        results[setting] = run_trial(spec)
    captured, eager = results["on"], results["off"]
    assert captured.protocol["graph"] == "captured" and eager.protocol["graph"] == "eager: solver.cuda_graph=off"
    assert captured.test["test_nll"] == pytest.approx(eager.test["test_nll"], rel=1e-3)
    assert abs(captured.test["test_ece"] - eager.test["test_ece"]) <= 0.01
    assert abs(captured.test["test_accuracy"] - eager.test["test_accuracy"]) <= 0.02


# Modules the GPU check's machine lacks, hidden from a pytest run in a child process.
_WITHOUT_RAY_OPTUNA_MLFLOW = """
import importlib.abc, sys
class Missing(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name.partition(".")[0] in ("ray", "optuna", "mlflow"):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
sys.meta_path.insert(0, Missing())
import pytest
sys.exit(pytest.main(sys.argv[1:]))
"""


@pytest.mark.system
def test_the_gpu_cases_load_and_run_without_ray_optuna_or_mlflow():
    # The files .ci/gpu/run.sh selects (its grep): conftest and each of them must load without those modules, or
    # the GPU check runs no case at all (as from caa1f49 to 44a9f30). Each file has a case that passes or skips.
    tests = Path(__file__).parent
    files = sorted(f for f in tests.glob("test_*.py") if re.search(r"mark\.gpu|import DEVICES", f.read_text()))
    command = [sys.executable, "-c", _WITHOUT_RAY_OPTUNA_MLFLOW, "-q", "-rA", "-p", "no:cacheprovider", "-m", "gpu"]
    proc = subprocess.run(command + [str(f) for f in files], cwd=tests.parent, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    ran = set(re.findall(r"^(?:PASSED|SKIPPED \[\d+\]) tests/(test_\w+\.py)", proc.stdout, re.MULTILINE))
    assert ran == {f.name for f in files} and "test_machines.py" in ran, (ran, proc.stdout[-3000:])
