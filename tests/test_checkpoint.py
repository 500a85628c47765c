"""A trial resumed from its epoch checkpoint ends exactly like an uninterrupted one."""
import pytest
from fakes import DEVICES
from ndebench.models.integrate import SolverConfig
from ndebench.platform.spec.config import TrainingConfig
from ndebench.platform.worker.loop import run_trial
from ndebench.platform.worker.spec import TrialSpec
from ndebench.platform.worker.state import load_trial_state, save_trial_state

TRAINING = TrainingConfig(epochs=5, min_epochs=1, patience=2, lr=0.01, threads=1)


def _spec(model: str, regularizer: str, params: dict, device: str = "cpu") -> TrialSpec:
    return TrialSpec(model=model, dataset="synthetic", regularizer=regularizer, regularizer_params=params,
                     model_params={"hidden_size": 8}, training=TRAINING, solver=SolverConfig("euler"), seed=3,
                     device=device)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("model,regularizer,params", [
    ("neural_cde", "continuum_dropout", {"p": 0.3, "m": 10}),
    ("neural_sde", "continuum_dropout", {"p": 0.2, "m": 5}),
    ("neural_ode", "continuum_dropout", {"p": 0.3, "m": 10}),
])
def test_resume_from_checkpoint_is_exact(tmp_path, model, regularizer, params, device):
    # On a GPU the checkpoint is written from the device and read back onto the CPU (load_trial_state).
    spec = _spec(model, regularizer, params, device)
    records, saved = [], {}

    def keep(epoch, snapshot):
        if epoch == 2:
            saved["dir"] = tmp_path
            save_trial_state(snapshot(), tmp_path)

    full = run_trial(spec, on_epoch=records.append, on_checkpoint=keep)
    resumed_records = []
    resumed = run_trial(spec, on_epoch=resumed_records.append, resume_state=load_trial_state(saved["dir"]))
    assert resumed.status == full.status == "ok"
    assert (resumed.epochs, resumed.best_epoch) == (full.epochs, full.best_epoch)
    assert resumed.val == full.val and resumed.test == full.test
    strip = [{k: v for k, v in r.items() if not k.endswith("_time_s")} for r in records[2:]]
    assert [{k: v for k, v in r.items() if not k.endswith("_time_s")} for r in resumed_records] == strip


def test_resume_after_early_stop_trains_no_further(tmp_path):
    spec = _spec("neural_cde", "none", {})
    spec = TrialSpec(**{**spec.__dict__,
                        "training": TrainingConfig(epochs=40, min_epochs=0, patience=1, lr=1.0, threads=1)})
    last = {}
    full = run_trial(spec, on_checkpoint=lambda epoch, snapshot: last.update(state=snapshot(), epoch=epoch))
    assert full.epochs < 40 and last["state"]["stop"]
    save_trial_state(last["state"], tmp_path)
    records = []
    resumed = run_trial(spec, on_epoch=records.append, resume_state=load_trial_state(tmp_path))
    assert records == [] and resumed.epochs == full.epochs and resumed.test == full.test
