"""What a sweep prints while it runs: a line per finished trial, the stage view with stage and sweep ETAs
(running trials counted), `--progress-every`, and Ray's and MLflow's INFO lines kept off the console."""
from __future__ import annotations

import logging
from types import SimpleNamespace

import pytest
from ndebench.platform.cli.arguments import build_parser
from ndebench.platform.engine import progress
from ndebench.platform.engine.progress import StageProgress, eta_seconds, sampled_values, trial_line


def test_eta_counts_pending_running_and_later_trials():
    # mean 15 s; running for 5 s (10 s left) and 20 s (past the mean: 0 left); 4 pending; 6 later; 2 at once
    stage, sweep = eta_seconds([10.0, 20.0], [5.0, 20.0], pending=4, later=6, concurrency=2)
    assert stage == (4 * 15 + 10) / 2 == 35.0
    assert sweep == 35.0 + 6 * 15 / 2 == 80.0
    assert eta_seconds([], [3.0], pending=4, later=0, concurrency=1) is None
    assert eta_seconds([8.0], [], pending=0, later=0, concurrency=0) == (0.0, 0.0)


STACKED = """
study: eta
protocol: paper
models: [neural_cde]
datasets: [synthetic]
regularizers:
  none: {}
  continuum_dropout: {p: [0.1, 0.5], m: [5, 50]}
variants:
  continuum_dropout: grid
model: {hidden_size: [16, 64]}
training: {lr: [0.001, 0.005], epochs: 2}
base: {sampler: grid}
tune: {sampler: grid}
evaluate: {seeds: [0, 1, 2, 3, 4]}
resources: {cpu: 1, gpu: 0, stack: 5}
"""


@pytest.mark.parametrize(("stack", "after_base", "after_tune"), [(5, 1 + 6, 6), (1, 4 + 30, 30)])
def test_the_sweep_eta_counts_later_stages_in_tune_trials_as_they_stack(tmp_path, stack, after_base, after_tune):
    """The base stage searches hidden size x lr on none (4 unstacked trials); the tune stage the 2 x 2 grid of
    Continuum Dropout, one stack of 4 points at stack 5; the evaluate stage 6 cells x 5 seeds: none's 5 seeds are
    one stack, the tuned cell and its 4 grid variants (25 trials) 5 stacks. Unstacked, every point and seed is a
    Tune trial."""
    from ndebench.platform import api
    from ndebench.platform.engine.searchstage import later_trials

    path = tmp_path / "eta.yaml"
    path.write_text(STACKED.replace("stack: 5", f"stack: {stack}"))
    spec = api.load(path)
    assert later_trials(spec, "base") == after_base
    assert later_trials(spec, "tune") == after_tune


def test_a_trial_is_named_by_its_cell_and_its_seed_or_sampled_values():
    assert sampled_values({"trial": "k1#3"}, "3") == "seed 3"
    assert sampled_values({"trial": "k1#0+1"}, "0+1") == "seed 0+1"
    assert sampled_values({"cell": "k1", "regularizer.p": 0.3, "training.lr": 0.00512345, "regularizer.mask": "on",
                           "phase": "tune", "seed": 0}) == "p=0.3 lr=0.005123 mask=on"
    assert trial_line("tune", 4, 6, "m x d x cd", "p=0.3", "val_loss", 0.41234, "ok", 72.0) == (
        "  tune 4/6: m x d x cd [p=0.3]: val_loss 0.4123, ok, 1m12s")
    assert trial_line("evaluate", 1, 10, "m x d x none", "seed 0", None, None, "error: ValueError: x", 5) == (
        "  evaluate 1/10: m x d x none [seed 0]: error: ValueError: x, 0m05s")


def _trial(trial_id, config, result=None):
    return SimpleNamespace(trial_id=trial_id, config=config, last_result=result or {},
                           run_metadata=SimpleNamespace(pickled_error_filename="error.pkl"),
                           error_file=None, get_error=lambda: "ValueError: boom")


def test_stage_progress_prints_each_trial_and_a_view_with_both_etas(monkeypatch):
    clock = [100.0]
    monkeypatch.setattr(progress.time, "monotonic", lambda: clock[0])
    lines = []
    bar = StageProgress("tune", {"a": 2, "b": 1}, {"a": "A", "b": "B"}, "val_loss", "min", lines.append,
                        every_s=30.0, later=4, bar=False)
    first = _trial("t1", {"cell": "a", "regularizer.p": 0.1})
    second = _trial("t2", {"cell": "a", "regularizer.p": 0.3})
    bar.on_trial_start(0, [], first)
    bar.on_trial_start(0, [], second)
    clock[0] = 110.0
    bar.on_step_end(0, [])
    assert lines == []  # nothing ended yet, and the first view comes after 15 s
    bar.on_trial_complete(0, [], first.__class__(**{**vars(first), "last_result": {"status": "ok", "val_loss": 0.5}}))
    assert lines == ["  tune 1/3: A [p=0.1]: val_loss 0.5000, ok, 0m10s"]
    clock[0] = 115.0
    bar.on_step_end(0, [])
    # mean 10 s; t2 runs for 15 s (0 left); 1 pending (b); 4 later; 2 ran at once: stage 5 s, sweep 25 s
    assert lines[1:] == ["  tune: 1/3 trial(s) done, 1 running, elapsed 0m15s, ETA stage 0m05s, sweep 0m25s",
                         "    A: 1 done, 1 running, 0 pending  best 0.5000",
                         "    B: 0 done, 0 running, 1 pending"]
    bar.on_trial_error(0, [], second)
    assert lines[-2:] == ["  tune 2/3: A [p=0.3]: error: ValueError: boom, 0m15s", "  tune done: A (2 trial(s), "
                                                                                     "best val_loss 0.5000)"]


def test_the_live_bar_counts_finished_trials(capsys):
    stage = StageProgress("evaluate", {"a": 2}, {"a": "A"}, None, "min", print, bar=True, owners={"a#0": ("a", "0")})
    trial = _trial("t1", {"trial": "a#0"}, {"status": "ok", "test_accuracy": 0.75})
    stage.on_trial_start(0, [], trial)
    stage.on_trial_complete(0, [], trial)
    assert stage.bar.n == 1 and "ETA stage" in stage.bar.postfix
    # One ETA: tqdm's own remaining time ("<00:03") is not in the bar beside ndebench's.
    shown = str(stage.bar)
    assert shown.count("ETA") == 1 and "<" not in shown and "1/2 [" in shown, shown
    stage.on_experiment_end([])
    assert stage.bar is None
    assert "evaluate 1/2: A [seed 0]: test_accuracy 0.7500, ok" in capsys.readouterr().out


def test_a_stop_clears_the_live_bar_so_its_message_starts_a_line(capsys):
    """Ctrl-C arrives while a bar holds the cursor at the end of its line: ``close_bars`` clears it (a carriage
    return last), so the stop message that follows is a line of its own, not the bar's line continued."""
    stage = StageProgress("tune", {"a": 3}, {"a": "A"}, None, "min", print, bar=True)
    trial = _trial("t1", {"cell": "a"}, {"status": "ok", "test_accuracy": 0.75})
    stage.on_trial_start(0, [], trial)
    stage.on_trial_complete(0, [], trial)
    capsys.readouterr()
    progress.close_bars()
    print("[ndebench] SIGINT (Ctrl-C): stopping")
    out = capsys.readouterr().out
    assert out.endswith("\r[ndebench] SIGINT (Ctrl-C): stopping\n") and out.count("\n") == 1, repr(out)
    assert stage.bar.disable  # closed


@pytest.mark.parametrize("text,seconds", [("5", 5.0), ("0.5", 0.5)])
def test_progress_every_parses_seconds(text, seconds):
    args = build_parser().parse_args(["run", "c.yaml", "--progress-every", text])
    assert args.progress_every == seconds
    assert build_parser().parse_args(["run", "c.yaml"]).progress_every == 60.0


@pytest.mark.parametrize("text", ["0", "-3", "soon", "inf", "nan"])
def test_progress_every_refuses_what_is_not_a_positive_time(text, capsys):
    with pytest.raises(SystemExit) as exit_info:
        build_parser().parse_args(["run", "c.yaml", "--progress-every", text])
    assert exit_info.value.code == 2
    assert f"expected seconds > 0, got {text!r}" in capsys.readouterr().err


def test_ray_and_mlflow_info_lines_stay_off_the_console(monkeypatch, capsys):
    import mlflow  # noqa: F401 - configures MLflow's logger as a sweep does
    import ray  # noqa: F401 - installs Ray's console handler

    monkeypatch.setenv("MLFLOW_LOGGING_LEVEL", "INFO")  # recorded, so that the test leaves the variable as it was
    monkeypatch.delenv("MLFLOW_LOGGING_LEVEL")
    handlers = [h for h in logging.getLogger("ray").handlers if not isinstance(h, logging.FileHandler)]
    saved = [(h, h.level) for h in handlers] + [(logging.getLogger("mlflow"), logging.getLogger("mlflow").level)]
    try:
        progress.quiet_libraries()
        capsys.readouterr()
        logging.getLogger("mlflow.store").info("mlflow info line")
        logging.getLogger("mlflow.store").warning("mlflow warning line")
        err = capsys.readouterr().err
        assert "mlflow warning line" in err and "mlflow info line" not in err
        # Ray's console handler holds the stream it was made with (pytest's, here): its level is what decides.
        assert handlers and all(h.level == logging.WARNING for h in handlers)
        assert logging.getLogger("ray").isEnabledFor(logging.INFO)  # the log file still gets INFO
    finally:
        for owner, level in saved:
            owner.setLevel(level)
