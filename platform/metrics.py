"""Test-split metrics of a classifier: accuracy, NLL, ECE, top-5 accuracy, AUROC and reliability bins.

Inputs are numpy arrays or torch tensors. ``probs`` is the predictive distribution: ``(N, K)`` class
probabilities, or ``(N,)`` / ``(N, 1)`` for a binary task, holding P(class 1). The predicted labels used for
accuracy are passed separately because Continuum Dropout predicts with the head on the MC-mean latent
(Algorithm 1) while NLL, ECE and the reliability bins use the MC predictive distribution.
"""
from __future__ import annotations

from typing import Any

import numpy as np
from sklearn.metrics import roc_auc_score

NLL_FLOOR = 1e-12
DEFAULT_BINS = 10


def _numpy(x: Any) -> np.ndarray:
    if hasattr(x, "detach"):
        x = x.detach().cpu().numpy()
    return np.asarray(x)


def _class_probs(probs: Any) -> np.ndarray:
    """``(N, K)`` class probabilities; a binary ``(N,)`` or ``(N, 1)`` P(class 1) becomes ``[1-p, p]``."""
    p = _numpy(probs).astype(np.float64)
    if p.ndim == 2 and p.shape[1] == 1:
        p = p[:, 0]
    if p.ndim == 1:
        return np.stack([1.0 - p, p], axis=1)
    if p.ndim != 2:
        raise ValueError(f"probs must have shape (N, K), (N,) or (N, 1); got {p.shape}")
    return p


def _labels(targets: Any, n: int) -> np.ndarray:
    y = _numpy(targets)
    if y.shape != (n,):
        raise ValueError(f"targets must have shape ({n},) to match probs; got {y.shape}")
    return y.astype(np.int64)


def predicted_labels(predicted: Any) -> np.ndarray:
    """Labels ``(N,)`` from integer labels ``(N,)``, class logits ``(N, K)`` (argmax) or binary logits
    ``(N,)`` / ``(N, 1)`` (class 1 where the logit is positive). Integer dtype means labels, float means logits."""
    x = _numpy(predicted)
    if np.issubdtype(x.dtype, np.integer) or x.dtype == np.bool_:
        if x.ndim != 1:
            raise ValueError(f"predicted labels must have shape (N,); got {x.shape}")
        return x.astype(np.int64)
    if x.ndim == 2 and x.shape[1] > 1:
        return x.argmax(axis=1)
    return (x.reshape(len(x)) > 0).astype(np.int64)


def calibration_bins(probs: Any, targets: Any, n_bins: int = DEFAULT_BINS) -> dict[str, Any]:
    """Reliability counts over ``n_bins`` equal-width confidence bins on [0, 1].

    Confidence is the top class probability ``max_k probs[i, k]`` (``max(p, 1-p)`` for binary) and a
    prediction is correct when that class is the target. Bin ``b`` holds confidences in
    ``(b/n_bins, (b+1)/n_bins]`` (0 goes to the first bin). Returns
    ``{"n_bins", "count", "confidence_sum", "correct_sum"}`` with per-bin lists, which add up across seeds;
    the accuracy of bin b is ``correct_sum[b] / count[b]`` and its mean confidence
    ``confidence_sum[b] / count[b]``.
    """
    if n_bins < 1:
        raise ValueError(f"n_bins must be a positive integer; got {n_bins}")
    p = _class_probs(probs)
    y = _labels(targets, len(p))
    confidence = p.max(axis=1)
    correct = (p.argmax(axis=1) == y).astype(np.float64)
    edges = np.linspace(0.0, 1.0, n_bins + 1)
    index = np.searchsorted(edges[1:-1], confidence, side="left")
    return {
        "n_bins": n_bins,
        "count": np.bincount(index, minlength=n_bins).astype(int).tolist(),
        "confidence_sum": np.bincount(index, weights=confidence, minlength=n_bins).tolist(),
        "correct_sum": np.bincount(index, weights=correct, minlength=n_bins).tolist(),
    }


def expected_calibration_error(bins: dict[str, Any]) -> float:
    """``ECE = sum_b |B_b|/N |acc_b - conf_b| = sum_b |correct_sum_b - confidence_sum_b| / N`` from
    :func:`calibration_bins` output (possibly summed over runs)."""
    count = np.asarray(bins["count"], dtype=np.float64)
    gap = np.abs(np.asarray(bins["correct_sum"], dtype=np.float64) - np.asarray(bins["confidence_sum"]))
    return float(gap.sum() / count.sum())


def merge_calibration_bins(all_bins: list[dict[str, Any]]) -> dict[str, Any]:
    """Sum the per-bin counts and sums of several :func:`calibration_bins` results with the same ``n_bins``."""
    sizes = {b["n_bins"] for b in all_bins}
    if len(sizes) != 1:
        raise ValueError(f"cannot merge calibration bins with different n_bins: {sorted(sizes)}")
    return {
        "n_bins": sizes.pop(),
        **{key: np.sum([b[key] for b in all_bins], axis=0).tolist() for key in ("count", "confidence_sum", "correct_sum")},
    }


def classification_metrics(
    probs: Any, targets: Any, predicted: Any | None = None, *, top5: bool = False, n_bins: int = DEFAULT_BINS
) -> dict[str, float]:
    """Metrics of N test examples.

    - ``accuracy``: mean of ``predicted == targets`` (``predicted`` as in :func:`predicted_labels`; when it
      is None, the argmax of ``probs``).
    - ``nll``: ``-mean_i log max(probs[i, y_i], 1e-12)``.
    - ``ece``: :func:`expected_calibration_error` of :func:`calibration_bins` with ``n_bins`` bins.
    - ``top5_accuracy`` when ``top5`` (the design reports it for 100-class tasks): the target is among the
      five largest probabilities; needs K >= 5.
    - ``auroc`` for two-class tasks: ``sklearn.metrics.roc_auc_score`` of P(class 1); NaN when the targets
      hold a single class, where it is undefined.
    """
    p = _class_probs(probs)
    y = _labels(targets, len(p))
    num_classes = p.shape[1]
    if y.size and (y.min() < 0 or y.max() >= num_classes):
        raise ValueError(f"targets must lie in [0, {num_classes - 1}]; got range [{y.min()}, {y.max()}]")
    labels = p.argmax(axis=1) if predicted is None else predicted_labels(predicted)
    if labels.shape != y.shape:
        raise ValueError(f"predicted must give {len(y)} labels; got {labels.shape}")
    out = {
        "accuracy": float(np.mean(labels == y)),
        "nll": float(-np.mean(np.log(np.maximum(p[np.arange(len(y)), y], NLL_FLOOR)))),
        "ece": expected_calibration_error(calibration_bins(p, y, n_bins)),
    }
    if top5:
        if num_classes < 5:
            raise ValueError(f"top-5 accuracy needs at least 5 classes; got {num_classes}")
        top = np.argpartition(-p, 4, axis=1)[:, :5]
        out["top5_accuracy"] = float(np.mean((top == y[:, None]).any(axis=1)))
    if num_classes == 2:
        out["auroc"] = float(roc_auc_score(y, p[:, 1])) if len(np.unique(y)) == 2 else float("nan")
    return out
