"""`ndebench bench`: the JSON schema and sanity of the numbers on a tiny size (never timing thresholds)."""
import json
import math

import pytest
import torch
from ndebench.platform.bench.speed import ROW_KEYS, interleaved_medians
from ndebench.platform.cli.main import main

TINY = ["--hidden", "4", "--batch", "3,5", "--length", "6", "--reps", "2", "--threads", "1"]


def test_bench_json_rows_have_the_documented_schema(capsys):
    threads = torch.get_num_threads()
    try:
        assert main(["bench", "--json", "--models", "neural_cde,ode_rnn", "--n-mc", "3", *TINY]) == 0
    finally:
        torch.set_num_threads(threads)
    rows = json.loads(capsys.readouterr().out)["rows"]
    assert [(r["model"], r["batch"]) for r in rows] == [("neural_cde", 3), ("neural_cde", 5),
                                                       ("ode_rnn", 3), ("ode_rnn", 5)]
    for row in rows:
        assert tuple(row) == ROW_KEYS
        assert (row["hidden"], row["length"], row["solver"], row["device"], row["n_mc"]) == (4, 6, "euler", "cpu", 3)
        for key in ("train_ms_none", "train_ms_cd", "eval_ms_one", "eval_ms_mc", "draw_ms"):
            assert math.isfinite(row[key]) and row[key] > 0
        assert row["train_ratio"] == pytest.approx(row["train_ms_cd"] / row["train_ms_none"], rel=1e-2)
        assert row["mc_ratio"] == pytest.approx(row["eval_ms_mc"] / row["eval_ms_one"], rel=1e-2)
        assert row["graph"].startswith("eager: device cpu")


def test_bench_draw_reports_the_asked_shape(capsys):
    assert main(["bench", "draw", "--json", "--batch", "4", "--hidden", "8", "--length", "11", "--m", "5",
                 "--reps", "2"]) == 0
    row = json.loads(capsys.readouterr().out)
    assert {k: row[k] for k in ("batch", "hidden", "points", "horizon", "p", "m", "device")} == {
        "batch": 4, "hidden": 8, "points": 11, "horizon": 10.0, "p": 0.3, "m": 5.0, "device": "cpu"}
    assert row["draw_ms"] > 0


@pytest.mark.parametrize("argv,needle", [
    (["--models", "image_node"], "'image_node'"),
    (["--models", "neural_cdx"], "valid: ancde"),
    (["--solver", "rk9"], "unknown solver method 'rk9'"),
    (["--p", "1.5"], "p=1.5"),
    (["--device", "tpu"], "unknown device 'tpu'"),
])
def test_bench_rejects_bad_input_with_exit_2(capsys, argv, needle):
    assert main(["bench", *argv, *TINY]) == 2
    assert needle in capsys.readouterr().err


def test_bench_rejects_non_positive_sizes():
    with pytest.raises(SystemExit) as exit_info:
        main(["bench", "--batch", "0"])
    assert exit_info.value.code == 2


def test_interleaved_medians_rotate_the_order_and_skip_the_warmup():
    calls = []
    medians = interleaved_medians({"a": lambda: calls.append("a"), "b": lambda: calls.append("b")}, reps=3,
                                  device=torch.device("cpu"), warmup=1)
    assert calls == ["a", "b", "b", "a", "a", "b", "b", "a"]
    assert set(medians) == {"a", "b"} and all(v >= 0 for v in medians.values())


def test_steady_spacing_skips_the_completions_that_carry_the_stage_start():
    from ndebench.platform.bench.speed import _steady_spacing

    assert _steady_spacing([13.0, 10.0, 12.0, 11.0], 1) == 1.0
    # Two workers: the first two completions open the window; then one trial every 0.5 s.
    assert _steady_spacing([10.0, 10.5, 9.0, 11.0, 11.5], 2) == 0.5
