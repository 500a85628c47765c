"""Trained weights as MLflow artifacts: ``model/state_dict.pt`` of an evaluate run (``torch.save`` of the
model's state dict), so that a study can be re-scored later (``ndebench reevaluate``) without retraining."""
from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import torch

ARTIFACT_DIR = "model"
ARTIFACT = f"{ARTIFACT_DIR}/state_dict.pt"


def log_weights(client: Any, run_id: str, state_dict: dict[str, torch.Tensor]) -> None:
    """Log ``state_dict`` (tensors moved to the CPU) as artifact ``model/state_dict.pt`` of run ``run_id``."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "state_dict.pt"
        torch.save({k: v.detach().cpu() for k, v in state_dict.items()}, path)
        client.log_artifact(run_id, str(path), ARTIFACT_DIR)


def load_weights(client: Any, run_id: str) -> dict[str, torch.Tensor]:
    """The state dict logged by :func:`log_weights` for ``run_id``; a ``FileNotFoundError`` naming the run
    when it has none (weights logging was off, or the run predates it)."""
    with tempfile.TemporaryDirectory() as tmp:
        try:
            path = client.download_artifacts(run_id, ARTIFACT, tmp)
        except Exception as exc:  # noqa: BLE001 - MLflow raises its own types for a missing artifact
            raise FileNotFoundError(f"run {run_id} has no {ARTIFACT} artifact (trained with weights logging "
                                    f"off, or before it existed): {exc}") from exc
        return torch.load(path, map_location="cpu", weights_only=True)
