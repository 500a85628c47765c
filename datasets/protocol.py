"""The preprocessing protocol of the reference pipeline, shared by every time-series dataset.

Order (torch-ists / Stable-Neural-SDEs, see peer-pipelines.md sections 1.2-1.5): labels -> ``0..K-1``;
unequal lengths resampled to the longest; missing points dropped per (sample, channel) from one seeded
generator; stratified 70/15/15 split; per-channel z-score with train statistics. Normalization happens
before any interpolation: models build their splines from the normalized values.
"""
from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch
from ndebench.datasets.bundle import DatasetBundle, Split, Task

NORM_EPS = 1e-5


def check_missing_rate(rate: float) -> float:
    """Return ``rate`` as a float; raise ``ValueError`` naming it unless ``0 <= rate < 1``."""
    rate = float(rate)
    if not 0.0 <= rate < 1.0:
        raise ValueError(f"missing_rate must be in [0, 1); got {rate!r}")
    return rate


def label_indices(labels: Sequence) -> tuple[torch.Tensor, list]:
    """Map labels to ``0..K-1`` in the sorted order of the unique labels (``np.unique``, as the reference).

    Returns ``targets`` ``(N,)`` int64 and the class labels, ``classes[k]`` being the label of index ``k``.
    Labels read from ``.ts`` files are strings, so ``"10"`` sorts before ``"2"`` exactly as in the
    reference; the order matters because the stratified split depends on it.
    """
    classes, inverse = np.unique(np.asarray(labels), return_inverse=True)
    return torch.as_tensor(inverse.reshape(-1), dtype=torch.long), classes.tolist()


def resample_series(series: Sequence[Sequence[np.ndarray]], length: int | None = None) -> np.ndarray:
    """Stack ``series[i][c]`` (sample ``i``, channel ``c``, a 1-D array of length ``L_ic``) into ``(N, L, C)``.

    Every channel is linearly resampled to ``L`` (default: the longest) with ``np.interp`` on a common
    ``[0, 1]`` parameterisation, so its first and last values are kept (the reference's source grid ends
    one step late, which clips the end of each series; this does not). Channels already of length ``L``
    are copied unchanged.
    """
    length = max(len(channel) for sample in series for channel in sample) if length is None else length
    out = np.empty((len(series), length, len(series[0])), dtype=np.float64)
    target = np.linspace(0.0, 1.0, length)
    for i, sample in enumerate(series):
        for c, channel in enumerate(sample):
            channel = np.asarray(channel, dtype=np.float64)
            if len(channel) == length:
                out[i, :, c] = channel
            else:
                out[i, :, c] = np.interp(target, np.linspace(0.0, 1.0, len(channel)), channel)
    return out


def drop_points(values: torch.Tensor, rate: float, seed: int) -> torch.Tensor:
    """A copy of ``values`` ``(N, L, C)`` with exactly ``floor(rate * L)`` time points set to NaN per
    (sample, channel).

    The positions come from one ``torch.Generator().manual_seed(seed)`` consumed sample by sample,
    channel by channel (``randperm(L)[:floor(rate L)]``), as in the 2025 reference pipeline, so the
    pattern depends on the seed and the sample order.
    """
    rate = check_missing_rate(rate)
    out = values.clone()
    n, length, channels = out.shape
    count = math.floor(rate * length)
    if count == 0:
        return out
    generator = torch.Generator().manual_seed(seed)
    for i in range(n):
        for c in range(channels):
            out[i, torch.randperm(length, generator=generator)[:count], c] = float("nan")
    return out


def stratified_split(
    targets: torch.Tensor, first_state: int, second_state: int | None = None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Stratified 70/15/15 split: ``train_test_split(train_size=0.7, stratify=y, random_state=first_state)``,
    then 50/50 of the rest, stratified, with ``random_state=second_state`` (default ``first_state``).

    The UEA pipeline uses the run seed for both; Speech Commands and Sepsis use the fixed states 0 and 1.
    Returns sorted int64 index tensors ``(train, val, test)``.
    """
    # Imported here: the sweep's driver imports this module through the dataset registry but splits no data,
    # and importing scikit-learn costs a process a few tenths of a second of CPU.
    from sklearn.model_selection import train_test_split

    y = targets.numpy()
    index = np.arange(len(y))
    train, rest = train_test_split(index, train_size=0.7, stratify=y, random_state=first_state)
    second = first_state if second_state is None else second_state
    val, test = train_test_split(rest, train_size=0.5, stratify=y[rest], random_state=second)
    return tuple(torch.as_tensor(np.sort(part), dtype=torch.long) for part in (train, val, test))


def zscore(values: torch.Tensor, train_index: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-channel ``(x - mean) / (std + 1e-5)`` with the non-NaN mean and (unbiased) std of the train rows.

    ``values`` ``(N, ..., C)``; returns the normalized values (NaNs kept) and ``mean``, ``std`` ``(C,)``.
    A channel with no observed train value gets mean 0 and std 1.
    """
    train = values[train_index].reshape(-1, values.shape[-1]).double()
    observed = ~torch.isnan(train)
    count = observed.sum(0)
    filled = torch.where(observed, train, 0.0)
    mean = filled.sum(0) / count.clamp(min=1)
    var = (torch.where(observed, train - mean, 0.0) ** 2).sum(0) / (count - 1).clamp(min=1)
    mean = torch.where(count > 0, mean, 0.0)
    std = torch.where(count > 1, var.sqrt(), 1.0)
    # applied in the input's dtype: statistics need float64, the (large) normalized copy does not
    normalized = (values - mean.to(values.dtype)) / (std + NORM_EPS).to(values.dtype)
    return normalized, mean, std


def observation_intensity(values: torch.Tensor) -> torch.Tensor:
    """Cumulative count of observations per channel along time: ``cumsum(~isnan(values), dim=1)``, ``(N, L, C)``."""
    return torch.cumsum(~torch.isnan(values), dim=1).to(values.dtype)


def build_bundle(
    name: str,
    values: torch.Tensor,
    targets: torch.Tensor,
    *,
    times: torch.Tensor,
    split: tuple[torch.Tensor, torch.Tensor, torch.Tensor],
    source: str,
    num_classes: int,
    task: Task = "classification",
    static: torch.Tensor | None = None,
    intensity: bool = False,
    final_index: torch.Tensor | None = None,
    extra: dict | None = None,
) -> DatasetBundle:
    """Normalize ``values`` ``(N, L, C)`` with train statistics and cut it into a :class:`DatasetBundle`.

    ``split`` holds the train/val/test row indices; ``static`` ``(N, S)`` is passed through unchanged
    (callers normalize it themselves where the reference does). With ``intensity`` the C observation-count
    channels of :func:`observation_intensity` are appended after normalization (unnormalized, as the
    reference), giving ``2C`` channels. ``final_index`` ``(N,)`` (each sample's last observation index,
    for padded sequences) is cut like the targets. The normalization statistics and the split indices are recorded
    in ``extra`` (``mean``, ``std``, ``indices``).
    """
    normalized, mean, std = zscore(values, split[0])
    normalized = normalized.float()
    if intensity:
        normalized = torch.cat([normalized, observation_intensity(normalized)], dim=-1)
    splits = [
        Split(normalized[idx], targets[idx], None if static is None else static[idx].float(),
              None if final_index is None else final_index[idx].long())
        for idx in split
    ]
    info = dict(extra or {})
    info.update(mean=mean.float(), std=std.float(), indices=dict(zip(("train", "val", "test"), split, strict=True)))
    return DatasetBundle(
        name=name, times=times.float(), train=splits[0], val=splits[1], test=splits[2], task=task,
        num_classes=num_classes, channels=int(normalized.shape[-1]), source=source, extra=info,
        count_channels=int(values.shape[-1]) if intensity else 0,
    )


def uea_protocol(
    name: str,
    values: torch.Tensor,
    labels: Sequence,
    *,
    seed: int,
    missing_rate: float,
    source: str,
    extra: dict | None = None,
) -> DatasetBundle:
    """The UEA/UCR protocol on ``values`` ``(N, L, C)`` (equal lengths) and raw ``labels`` ``(N,)``.

    Labels mapped to ``0..K-1`` (sorted); ``floor(missing_rate * L)`` points dropped per (sample,
    channel) with generator seed ``seed``; stratified 70/15/15 split with ``random_state=seed``; train-only
    z-score; ``times = linspace(0, 1, L)`` (T = 1). ``extra`` gains ``classes`` and ``missing_rate``.
    """
    rate = check_missing_rate(missing_rate)
    targets, classes = label_indices(labels)
    values = drop_points(values, rate, seed)
    split = stratified_split(targets, seed)
    info = {"classes": classes, "missing_rate": rate, **(extra or {})}
    return build_bundle(
        name, values, targets, times=torch.linspace(0.0, 1.0, values.shape[1]), split=split, source=source,
        num_classes=len(classes), extra=info,
    )
