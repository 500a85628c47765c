"""Build every model of a sweep once on a tiny input, so that a value a model refuses is a config error.

Each model is built for every combination of its ``model.*`` candidates (a fixed value, each choice of a
categorical space, both bounds of a numeric range), with the unregularized regularizer, 2 input channels,
2 classes and 4 observation times (or 8 x 8 images). Nothing touches data.
"""
from __future__ import annotations

import itertools
from typing import Any

import torch
from ndebench.platform.spec.config import ConfigError, Space, SweepSpec

MAX_BUILDS_PER_MODEL = 64


def _candidates(value: Any) -> tuple[Any, ...]:
    if not isinstance(value, Space):
        return (value,)
    if value.kind == "randint":
        return (value.args[0], value.args[1] - 1)
    if value.kind == "choice":
        return value.args
    return ()  # continuous model hyperparameters are checked by their bounds in config.py


def check_models_build(spec: SweepSpec) -> int:
    """Build each (model, model hyperparameters) combination once; return how many were built.

    Raises :class:`ConfigError` naming the model, the values and the model's own message.
    """
    from ndebench.models.base import DataSpec
    from ndebench.models.registry import create_model, model_info
    from ndebench.regularizers.registry import create_regularizer

    built = 0
    for model in spec.models:
        params = {k: _candidates(v) for k, v in spec.model_params(model).items()}
        params = {k: v for k, v in params.items() if v}
        combos = list(itertools.product(*params.values()))
        if len(combos) > MAX_BUILDS_PER_MODEL:
            combos = [tuple(v[i % len(v)] for v in params.values()) for i in range(max(map(len, params.values())))]
        data = (DataSpec(3, 2, image_size=(8, 8)) if model_info(model).input_kind == "image"
                else DataSpec(2, 2, times=torch.linspace(0.0, 1.0, 4)))
        for combo in combos:
            values = dict(zip(params, combo, strict=True))
            try:
                create_model(model, data, regularizer=create_regularizer("none"), solver=spec.solver_for(model),
                             **values)
            except Exception as exc:  # noqa: BLE001 - any refusal by the model is the user's config to fix
                shown = ", ".join(f"{k}={v!r}" for k, v in values.items()) or "its defaults"
                raise ConfigError(f"model {model!r} refuses {shown}: {exc} (set it in a per-model block, "
                                  f"e.g. model: {{{model}: {{...}}}})") from None
            built += 1
    return built


def tpe_warnings(spec: SweepSpec) -> list[str]:
    """Stages whose TPE budget never leaves Optuna's random start-up phase."""
    from ndebench.platform.spec.plan import plan_stages

    out = []
    for stage in plan_stages(spec):
        tune = stage.tune
        searched = [c for c in stage.cells if c.budget]
        if tune.sampler == "tpe" and searched and tune.num_samples <= tune.n_startup_trials:
            where = "base" if stage.name == "base" else "tune"
            out.append(f"stage {stage.name}: {where}.num_samples={tune.num_samples} <= n_startup_trials="
                       f"{tune.n_startup_trials}, so TPE never leaves its random start-up phase (this is random "
                       f"search); lower {where}.n_startup_trials, raise num_samples, or say sampler: random")
    return out
