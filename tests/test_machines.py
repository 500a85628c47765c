"""Cross-machine reproducibility, recorded: a trial run names the CPU capability, threads and GPU it ran with, and
the report of a study whose runs mix them says so (table.md, report.html, summary.json)."""
from __future__ import annotations

import json

import pytest
import torch
from ndebench.platform.cli.main import main
from ndebench.platform.engine import provenance
from ndebench.platform.record import tracking
from ndebench.platform.record.schema import MACHINE_TAGS, TAG


def test_a_trial_records_the_cpu_capability_threads_and_no_gpu_on_the_cpu():
    tags = provenance.worker_provenance("cpu", threads=3)
    assert set(MACHINE_TAGS) <= set(tags)
    assert tags["cpu_capability"] == torch.backends.cpu.get_cpu_capability() != ""
    assert (tags["threads"], tags["gpu"], tags["gpu_driver"]) == ("3", "none", "none")
    assert provenance.worker_provenance("cpu")["threads"] == str(torch.get_num_threads())
    assert tags["cpu_model"] and tags["device"] == f"cpu: {tags['cpu_model']}"


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_a_gpu_trial_records_the_device_name_and_driver():
    tags = provenance.machine_provenance("cuda")
    assert tags["gpu"] == torch.cuda.get_device_name(0) and tags["gpu_driver"] not in ("none", "")


def _log(uri: str, capabilities: list[str]) -> None:
    """Evaluate runs of `none` and Continuum Dropout on one (model, dataset), seeds 0-4 each, as trials record them;
    run i ran with CPU capability ``capabilities[i % len(capabilities)]``."""
    from mlflow.entities import Metric

    client = tracking.client(uri)
    experiment = tracking.ensure_experiment(uri, "mixed")
    for r, regularizer in enumerate(("none", "continuum_dropout")):
        for seed in range(5):
            i = 5 * r + seed
            tags = {"model": "neural_cde", "dataset": "synthetic", "regularizer": regularizer, "seed": str(seed),
                    "status": "ok", "phase": "evaluate", "kind": "trial", "metric": "accuracy",
                    "cpu_model": "Some CPU", "cpu_capability": capabilities[i % len(capabilities)], "threads": "2",
                    "gpu": "none", "gpu_driver": "none"}
            run_id = client.create_run(experiment, tags={f"{TAG}{k}": v for k, v in tags.items()}).info.run_id
            client.log_batch(run_id, metrics=[Metric("test_accuracy", 0.7 + 0.01 * seed + 0.02 * r, 0, 0)])
            client.set_terminated(run_id, "FINISHED")


@pytest.mark.parametrize("capabilities", [["AVX512", "AVX2"], ["AVX512"]])
def test_the_report_says_when_runs_mix_cpu_capabilities(tmp_path, uri, capabilities):
    _log(uri, capabilities)
    assert main(["report", "--study", "mixed", "--tracking-uri", uri, "--out", str(tmp_path), "--figures",
                 "none"]) == 0
    summary = json.loads((tmp_path / "mixed" / "summary.json").read_text())
    table, page = ((tmp_path / "mixed" / name).read_text() for name in ("table.md", "report.html"))
    assert summary["machines"]["runs_by"]["threads"] == {"2": 10}
    if len(capabilities) == 1:
        assert summary["machines"]["mixed"] == [] and summary["machines"]["note"] is None
        assert "Mixed machines" not in table and "Mixed machines" not in page
        return
    note = ("Mixed machines: the runs differ in cpu capability: AVX2 (5 runs), AVX512 (5 runs). Floating-point "
            "kernels differ between these")
    assert summary["machines"]["mixed"] == ["cpu_capability"]
    assert summary["machines"]["runs_by"]["cpu_capability"] == {"AVX2": 5, "AVX512": 5}
    assert summary["machines"]["note"].startswith(note)
    assert note in table and note in page
