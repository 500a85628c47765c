"""A tiny learnable classification set generated in memory, so fast tests and CI never need files."""
from __future__ import annotations

import os

import numpy as np
import torch
from ndebench.datasets.bundle import DatasetBundle
from ndebench.datasets.protocol import uea_protocol
from ndebench.datasets.registry import register_dataset


@register_dataset("synthetic", summary="3 classes of noisy 2-channel sinusoids (1, 2, 3 cycles), made from the seed",
                  expected={"samples": 96, "classes": 3, "channels": 2, "length": 32},
                  locate=lambda member, data_dir: "generated in memory", display="Synthetic")
def synthetic(
    *,
    seed: int = 0,
    data_dir: str | os.PathLike | None = None,
    missing_rate: float = 0.0,
    num_samples: int = 96,
    length: int = 32,
    noise: float = 0.1,
) -> DatasetBundle:
    """Class ``k`` in ``{0, 1, 2}``: ``x(s) = (sin(2 pi (k+1) s + phi), cos(2 pi (k+1) s + phi)) + eps`` on
    ``s = linspace(0, 1, length)``, phase ``phi ~ U[0, 2 pi)``, ``eps ~ N(0, noise^2)``, balanced classes.

    Generated with ``numpy.random.default_rng(seed)`` and then processed by the UEA protocol (missing
    rate, stratified 70/15/15 by ``seed``, train-only z-score, T = 1). ``data_dir`` is accepted and
    ignored so every dataset takes the same arguments. Values ``(num_samples, length, 2)``.
    """
    rng = np.random.default_rng(seed)
    labels = np.arange(num_samples) % 3
    s = np.linspace(0.0, 1.0, length)
    angle = 2 * np.pi * (labels[:, None] + 1) * s + rng.uniform(0, 2 * np.pi, (num_samples, 1))
    values = np.stack([np.sin(angle), np.cos(angle)], axis=-1) + noise * rng.standard_normal((num_samples, length, 2))
    return uea_protocol(
        "synthetic", torch.from_numpy(values), labels, seed=seed, missing_rate=missing_rate,
        source=f"generated in memory (seed {seed})",
    )
