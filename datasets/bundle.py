"""The dataset contract: a bundle of train/val/test splits plus the metadata models and metrics need."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

import torch
from torch.utils.data import Dataset

Task = Literal["classification", "binary"]


@dataclass
class Split:
    """One split of a time-series dataset.

    ``values`` ``(N, L, C)`` float32, z-scored with train statistics, NaN where not observed;
    ``targets`` ``(N,)`` int64 class indices in ``0..K-1`` (0/1 for binary tasks); ``static`` ``(N, S)``
    optional time-invariant features (e.g. Sepsis demographics) that models feed into the initial state;
    ``final_index`` ``(N,)`` optional int64 index into ``times`` of each sample's last observation time
    (sequences of different lengths padded to L): models read the latent there, not at ``times[-1]``.
    """

    values: torch.Tensor
    targets: torch.Tensor
    static: torch.Tensor | None = None
    final_index: torch.Tensor | None = None

    def __len__(self) -> int:
        return int(self.targets.shape[0])


class _Splits:
    """What every bundle derives from its ``train``, ``val`` and ``test`` splits."""

    train: Any
    val: Any
    test: Any

    @property
    def num_samples(self) -> int:
        """N of the whole data set before the train/val/test split: for UEA the archive's train + test files,
        for images the archive's training images (train + val) and test images."""
        return len(self.train) + len(self.val) + len(self.test)


@dataclass
class DatasetBundle(_Splits):
    """Train/val/test splits on a common time grid ``times`` ``(L,)`` running from ``times[0]`` to ``T``.

    ``task`` is ``classification`` (K logits, cross-entropy) or ``binary`` (one logit, AUROC reported);
    ``channels`` is C; ``source`` says where the data came from (a package, a folder); ``extra`` holds
    dataset-specific metadata (e.g. the class names, the normalization statistics). ``count_channels`` K: the
    last K of the C channels are cumulative observation counts of the first K (the OI intensity), never NaN,
    so they say nothing of which times were observed.
    """

    name: str
    times: torch.Tensor
    train: Split
    val: Split
    test: Split
    task: Task
    num_classes: int
    channels: int
    source: str
    extra: dict = field(default_factory=dict)
    count_channels: int = 0
    input_kind: ClassVar[str] = "timeseries"

    @property
    def T(self) -> float:
        return float(self.times[-1])


@dataclass
class ImageBundle(_Splits):
    """Train/val/test image datasets that stream from disk, for the image models.

    ``train``, ``val``, ``test`` are ``torch.utils.data.Dataset``s yielding ``(image (C, H, W) float32,
    label int)``, already augmented (train) and normalized; the trial loop wraps them in DataLoaders, so a
    whole image set is never held as one tensor. ``image_size`` is ``(H, W)``; ``extra["batch_size"]`` is the
    paper's batch size for the set (App. D.3).
    """

    name: str
    train: Dataset
    val: Dataset
    test: Dataset
    num_classes: int
    channels: int
    image_size: tuple[int, int]
    source: str
    task: Task = "classification"
    extra: dict = field(default_factory=dict)
    input_kind: ClassVar[str] = "image"
