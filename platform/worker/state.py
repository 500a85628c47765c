"""A trial's checkpoint state on disk, and every random state it carries (Python, NumPy, torch, CUDA and
the trial's own :class:`TrialRNG` generators)."""
from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import numpy as np
import torch
from ndebench.models.integrate import TrialRNG


def rng_state(rng: TrialRNG) -> dict[str, Any]:
    # Plain data and tensors only, so that checkpoints load with torch.load(weights_only=True).
    name, keys, pos, has_gauss, gauss = np.random.get_state()
    state = {"python": random.getstate(), "numpy": [name, torch.from_numpy(keys.astype(np.int64)), int(pos),
                                                    int(has_gauss), float(gauss)],
             "torch": torch.get_rng_state(), "trial": rng.state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def load_rng_state(state: dict[str, Any], rng: TrialRNG) -> None:
    random.setstate(state["python"])
    name, keys, pos, has_gauss, gauss = state["numpy"]
    np.random.set_state((name, keys.numpy().astype(np.uint32), pos, has_gauss, gauss))
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
    rng.load_state(state["trial"])



STATE_FILE = "trial_state.pt"


def save_trial_state(state: dict[str, Any], directory: str | Path) -> Path:
    """Write a :func:`~ndebench.platform.worker.loop.run_trial` snapshot to ``directory/trial_state.pt``."""
    path = Path(directory) / STATE_FILE
    torch.save(state, path)
    return path


def load_trial_state(directory: str | Path) -> dict[str, Any]:
    """Read a snapshot written by :func:`save_trial_state`, onto the CPU. Only tensors and plain data are
    accepted (``weights_only=True``): a checkpoint can never run code."""
    return torch.load(Path(directory) / STATE_FILE, map_location="cpu", weights_only=True)
