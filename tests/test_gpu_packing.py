"""Fractional GPUs: ``resources.gpu`` takes a share of one GPU (four trials on a GPU at 0.25) or whole GPUs, and
each trial asks Ray for exactly that; Ray then sets the trial's ``CUDA_VISIBLE_DEVICES`` to the GPU it assigned,
which is the trial's ``cuda`` device."""
from __future__ import annotations

import pytest
from ndebench.platform.engine.stages import StageContext
from ndebench.platform.spec.config import ConfigError, parse_spec

BASE = {"study": "pack", "models": ["neural_cde"], "datasets": ["synthetic"], "regularizers": ["none"],
        "evaluate": {"seeds": [0]}, "training": {"epochs": 1}}


@pytest.mark.parametrize("gpu", [0.25, 0.5, 1, 1.0, 2])
def test_a_gpu_share_reaches_ray_as_each_trials_resources(tmp_path, gpu):
    spec = parse_spec({**BASE, "resources": {"cpu": 1, "gpu": gpu}})
    ctx = StageContext(spec, tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}", storage_path=tmp_path / "ray",
                       address=None, resume=False, data_dir=str(tmp_path), printer=print, verbose=False,
                       progress_every_s=60.0, retry_diverged=False, cell_statistics=None)
    ctx.place(gpus_available=1.0)
    assert ctx.device == "cuda" and ctx.resolve({})["device"] == "cuda"
    assert ctx.trainable_for("evaluate", parents={})._resources.required_resources == {"CPU": 1.0, "GPU": gpu}


@pytest.mark.parametrize("gpu", [1.5, -0.25, 2.5, "half", True])
def test_a_gpu_count_ray_cannot_place_is_refused_with_the_valid_forms(gpu):
    with pytest.raises(ConfigError, match=r"resources.gpu=.* must be a finite number in \[0, 1\] or an integer >= 1"):
        parse_spec({**BASE, "resources": {"gpu": gpu}})
