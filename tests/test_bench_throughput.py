"""`ndebench bench throughput CONFIG`: the JSON contract and bad input (exit 2) on a tiny config; the 2x goal of
stacking is measured by running the command (docs/performance.md), never by a timed test."""
import json

import pytest
import torch
import yaml
from ndebench.platform import api
from ndebench.platform.bench.throughput import cell_configs, fixed_value, pick_cell
from ndebench.platform.cli.main import main
from ndebench.platform.spec.sweepspec import Space

TINY = {
    "study": "tiny", "models": ["neural_cde"], "datasets": ["synthetic"],
    "dataset_options": {"num_samples": 40, "length": 8},
    "regularizers": {"none": {}, "continuum_dropout": {"p": [0.1, 0.3], "m": 5}},
    "model": {"hidden_size": 4}, "solver": {"method": "euler", "adjoint": False},
    "training": {"epochs": 1, "min_epochs": 1, "lr": {"loguniform": [1.0e-3, 1.0e-1]}, "threads": 1},
    "evaluate": {"seeds": [0, 1]},
}


@pytest.fixture
def config(tmp_path):
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(TINY))
    return str(path)


def test_throughput_json_names_the_rate_device_stack_and_concurrency(config, capsys):
    threads = torch.get_num_threads()
    try:
        code = main(["bench", "throughput", config, "--json", "--stack", "2",
                     "--cell", "neural_cde/synthetic/continuum_dropout"])
    finally:
        torch.set_num_threads(threads)
    assert code == 0
    result = json.loads(capsys.readouterr().out)
    assert {"trials_per_hour", "device", "stack", "concurrent"} <= set(result)
    assert (result["device"], result["stack"], result["concurrent"], result["trials"]) == ("cpu", 2, 1, 2)
    assert result["cell"] == "neural_cde/synthetic/continuum_dropout" and result["statuses"] == {"ok": 2}
    assert 1.0 <= result["mean_active_members"] <= 2.0 and result["notes"] == []
    # wall_s is printed to the millisecond: its rounding (at most 0.5 ms) bounds the relative difference.
    assert result["trials_per_hour"] == pytest.approx(2 / result["wall_s"] * 3600,
                                                      rel=0.0005 / result["wall_s"] + 1e-4)


@pytest.mark.parametrize("argv,needle", [
    (["--cell", "neural_cde/synthetic/dropout"], "neural_cde/synthetic/none"),
    (["--device", "tpu"], "unknown device 'tpu'"),
])
def test_throughput_rejects_bad_input_with_exit_2(config, capsys, argv, needle):
    assert main(["bench", "throughput", config, *argv]) == 2
    assert needle in capsys.readouterr().err


def test_throughput_needs_a_config_and_only_it_takes_one(config, capsys):
    assert main(["bench", "throughput"]) == 2
    assert main(["bench", "draw", config]) == 2
    assert "only bench throughput takes one" in capsys.readouterr().err


@pytest.mark.parametrize("flag", ["--stack", "--concurrent"])
def test_throughput_sizes_must_be_positive(config, flag):
    with pytest.raises(SystemExit) as exit_info:
        main(["bench", "throughput", config, flag, "0"])
    assert exit_info.value.code == 2


def test_a_searched_value_is_fixed_and_seeds_continue_past_the_config():
    assert fixed_value(Space("choice", (0.1, 0.3))) == 0.1
    assert fixed_value(Space("loguniform", (1.0e-3, 1.0e-1))) == pytest.approx(1.0e-2)
    assert fixed_value(Space("uniform", (0.0, 1.0))) == 0.5
    assert fixed_value(Space("randint", (2, 9))) == 2
    spec = api.load(TINY)
    configs = cell_configs(spec, pick_cell(spec, None), 4, "cpu")
    assert [c["seed"] for c in configs] == [0, 1, 2, 3]
    assert configs[0]["training.lr"] == pytest.approx(1.0e-2) and configs[0]["phase"] == "evaluate"


def test_best_tries_the_layouts_in_order_until_a_bigger_one_loses_and_lists_them():
    from ndebench.platform.bench.throughput import GPU_LAYOUTS, best_throughput, layouts

    rates = {(16, 1): 100.0, (64, 1): 300.0, (64, 4): 250.0, (128, 4): 900.0}
    asked = []

    def measure(stack, concurrent):
        asked.append((stack, concurrent))
        return {"trials_per_hour": rates[stack, concurrent], "stack": stack, "concurrent": concurrent}

    best = best_throughput(measure, layouts("cuda", 16, 32), say=lambda s: None)
    assert asked == list(GPU_LAYOUTS[:3]) and (best["stack"], best["concurrent"]) == (64, 1)
    assert best["tried"] == [{"stack": s, "concurrent": c, "trials_per_hour": rates[s, c]} for s, c in asked]
    assert layouts("cuda:1", 2, 32) == list(GPU_LAYOUTS)


def test_best_on_the_cpu_tries_the_config_stack_and_smaller_ones_and_says_the_ratio_to_one_at_a_time():
    from ndebench.platform.bench.throughput import best_throughput, layouts

    assert layouts("cpu", 2, 32) == [(1, 2), (4, 2), (16, 2), (32, 2)]
    assert layouts("cpu", 2, 5) == [(1, 2), (4, 2), (5, 2)] and layouts("cpu", 2, 1) == [(1, 2)]
    rates = {1: 100.0, 4: 250.0, 16: 380.0, 32: 410.0}
    said = []
    best = best_throughput(lambda stack, c: {"trials_per_hour": rates[stack], "stack": stack, "concurrent": c,
                                             "mean_active_members": float(stack)},
                           layouts("cpu", 2, 32), say=said.append)
    assert [row["vs_one"] for row in best["tried"]] == [1.0, 2.5, 3.8, 4.1]
    assert (best["stack"], best["vs_one"]) == (32, 4.1)
    assert said[-1] == ("bench throughput --best: stack 32 x 2 process(es): 410.0 trials/h, 4.1x one at a time, "
                        "32.0 members per stacked epoch")


def test_best_refuses_a_stack_or_processes_given_too(config, capsys):
    assert main(["bench", "throughput", config, "--best", "--stack", "4"]) == 2
    assert "--best chooses the stack and the processes itself: drop --stack 4" in capsys.readouterr().err
