"""Test-split metrics of a classifier: accuracy, NLL, ECE, top-5 accuracy, AUROC and reliability bins.

Inputs are numpy arrays or torch tensors. Two predictors of one model enter, as in the paper:

- the **point predictor** (``scores``): Algorithm 1's ``head(mean_j z_j(T))`` logits, ``(N, K)`` or
  ``(N,)`` / ``(N, 1)`` for a binary task. The headline metrics (accuracy, top-5 accuracy, AUROC) come
  from it; all three depend only on the ranking of the scores, so logits and their softmax/sigmoid agree.
- the **MC predictive distribution** (``probs``): the mean over passes of the per-pass probabilities,
  ``(N, K)`` or ``(N,)`` / ``(N, 1)`` holding P(class 1). NLL, ECE and the reliability bins come from it
  (App. D.4 applies the head per sample).
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

NLL_FLOOR = 1e-12
DEFAULT_BINS = 10
# Significant digits a decision (an improvement for early stopping and the best epoch, the plateau scheduler, a
# search's chosen point) reads of a validation value: values that differ by a few float32 ulps (a stacked member
# against its trial alone) round alike but at a rounding boundary (docs/protocol.md).
DECISION_DIGITS = 5


def decisive(value: float) -> float:
    """``value`` rounded to :data:`DECISION_DIGITS` significant digits (a relative step of 1e-5 to 1e-4), the
    figure every decision compares; infinities and NaN as they are."""
    return float(f"{value:.{DECISION_DIGITS}g}") if math.isfinite(value) else value


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


def _scores(scores: Any, num_classes: int) -> np.ndarray:
    """Point-predictor scores as ``(N, K)``; a binary ``(N,)`` / ``(N, 1)`` score ``s`` becomes ``[-s, s]``."""
    x = _numpy(scores).astype(np.float64)
    if x.ndim == 2 and x.shape[1] == 1:
        x = x[:, 0]
    if x.ndim == 1:
        x = np.stack([-x, x], axis=1)
    if x.ndim != 2 or x.shape[1] != num_classes:
        raise ValueError(f"scores must have shape (N, {num_classes}) (or (N,) for a binary task); got {x.shape}")
    return x


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
        **{key: np.sum([b[key] for b in all_bins], axis=0).tolist()
           for key in ("count", "confidence_sum", "correct_sum")},
    }


def classification_metrics(
    probs: Any, targets: Any, scores: Any | None = None, *, top5: bool = False, n_bins: int = DEFAULT_BINS
) -> dict[str, float]:
    """Metrics of N test examples.

    Headline metrics, from the point predictor ``scores`` (``probs`` when it is None):

    - ``accuracy``: mean of ``argmax_k scores[i, k] == y_i`` (binary: ``scores > 0``, or ``> 0.5`` for
      probabilities);
    - ``top5_accuracy`` when ``top5`` (the design reports it for 100-class tasks): ``y_i`` is among the five
      largest scores; needs K >= 5;
    - ``auroc`` for two-class tasks: ``sklearn.metrics.roc_auc_score`` of the class-1 score (rank-based, so a
      logit and its sigmoid agree); NaN when the targets hold a single class, where it is undefined.

    MC-predictive metrics, from ``probs``:

    - ``nll``: ``-mean_i log max(probs[i, y_i], 1e-12)``;
    - ``ece``: :func:`expected_calibration_error` of :func:`calibration_bins` with ``n_bins`` bins.
    """
    p = _class_probs(probs)
    y = _labels(targets, len(p))
    num_classes = p.shape[1]
    if y.size and (y.min() < 0 or y.max() >= num_classes):
        raise ValueError(f"targets must lie in [0, {num_classes - 1}]; got range [{y.min()}, {y.max()}]")
    point = p if scores is None else _scores(scores, num_classes)
    if len(point) != len(y):
        raise ValueError(f"scores must hold {len(y)} rows to match probs; got {len(point)}")
    out = {
        "accuracy": float(np.mean(point.argmax(axis=1) == y)),
        "nll": float(-np.mean(np.log(np.maximum(p[np.arange(len(y)), y], NLL_FLOOR)))),
        "ece": expected_calibration_error(calibration_bins(p, y, n_bins)),
    }
    if top5:
        if num_classes < 5:
            raise ValueError(f"top-5 accuracy needs at least 5 classes; got {num_classes}")
        top = np.argpartition(-point, 4, axis=1)[:, :5]
        out["top5_accuracy"] = float(np.mean((top == y[:, None]).any(axis=1)))
    if num_classes == 2:
        # Imported here: the sweep's driver imports this module but computes no metric, and importing
        # scikit-learn costs a process a few tenths of a second of CPU.
        from sklearn.metrics import roc_auc_score

        out["auroc"] = float(roc_auc_score(y, point[:, 1] - point[:, 0])) if len(np.unique(y)) == 2 else float("nan")
    return out


def uncertainty_metrics(probs: Any, z_var: Any) -> dict[str, float]:
    """Section 3.3's uncertainty of N test examples from the MC passes.

    - ``z_cov_trace``: ``mean_i tr Cov_j(z_j(T))_i = mean_i sum_h Var_j(z_jh(T))_i``, the mean trace of the
      sample covariance of ``z(T)`` over passes (``z_var`` ``(N, H)``: per-component unbiased variances; the
      trace needs only the diagonal); 0 for a single pass.
    - ``predictive_entropy``: ``mean_i -sum_k p_ik log p_ik`` of the MC predictive distribution ``probs``.
    """
    p = _class_probs(probs)
    v = _numpy(z_var).astype(np.float64)
    if v.ndim != 2 or len(v) != len(p):
        raise ValueError(f"z_var must have shape ({len(p)}, H) to match probs; got {v.shape}")
    entropy = -np.sum(np.where(p > 0, p * np.log(np.maximum(p, NLL_FLOOR)), 0.0), axis=1)
    return {"z_cov_trace": float(v.sum(axis=1).mean()), "predictive_entropy": float(entropy.mean())}
