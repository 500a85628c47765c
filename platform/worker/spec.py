"""What a trial is: :class:`TrialSpec`, one fully resolved (model, dataset, regularizer, seed), and
:class:`TrialResult`, its outcome. Light to import: no data, model or regularizer code."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ndebench.models.integrate import SolverConfig
from ndebench.platform.spec.config import TrainingConfig


@dataclass(frozen=True)
class TrialSpec:
    """A fully resolved trial: one (model, dataset, regularizer, seed) with fixed hyperparameters."""

    model: str
    dataset: str
    regularizer: str
    seed: int = 0
    phase: str = "evaluate"
    model_params: dict[str, Any] = field(default_factory=dict)
    regularizer_params: dict[str, Any] = field(default_factory=dict)
    training: TrainingConfig = TrainingConfig()
    solver: SolverConfig | None = None
    dataset_options: dict[str, Any] = field(default_factory=dict)
    data_dir: str | None = None
    device: str = "cpu"
    select: str = "best_epoch"

    @classmethod
    def from_flat(cls, config: dict[str, Any]) -> TrialSpec:
        """Build from the flat ``section.key`` config of a sweep trial (see ``SweepSpec.base_config``)."""

        def section(prefix: str) -> dict[str, Any]:
            return {k[len(prefix) + 1:]: v for k, v in config.items() if k.startswith(prefix + ".")}

        solver = section("solver")
        return cls(
            model=config["model"], dataset=config["dataset"], regularizer=config["regularizer"],
            seed=int(config.get("seed", 0)), phase=config.get("phase", "evaluate"),
            model_params=section("model"), regularizer_params=section("regularizer"),
            training=TrainingConfig(**section("training")), solver=SolverConfig(**solver) if solver else None,
            dataset_options=section("dataset"), data_dir=config.get("data_dir"), device=config.get("device", "cpu"),
            select=config.get("select", "best_epoch"),
        )


@dataclass
class TrialResult:
    """Outcome of a trial. ``status``: ``ok``, ``diverged`` (non-finite loss) or ``timeout``; ``best_epoch``: the
    epoch of ``val`` and ``weights`` (the last under ``select`` ``last_epoch``); ``protocol``: the test protocol
    (``test_protocol``, ``n_mc``, ``point_predictor``) and ``regularizer``, the regularizer's ``describe()``."""

    status: str
    epochs: int
    best_epoch: int
    val: dict[str, float]
    test: dict[str, float]
    calibration: dict[str, Any] | None
    protocol: dict[str, Any]
    message: str = ""
    weights: dict[str, Any] | None = None
