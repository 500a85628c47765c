import math

import numpy as np
import pytest
import torch
from ndebench.platform.common.metrics import (
    calibration_bins,
    classification_metrics,
    expected_calibration_error,
    merge_calibration_bins,
    uncertainty_metrics,
)

# Two occupied bins: (0.8, 0.9] holds A (right) and B (wrong) at confidence 0.85; (0.6, 0.7] holds C (right)
# and D (wrong) at 0.65. ECE = 2/4 |0.5 - 0.85| + 2/4 |0.5 - 0.65| = 0.175 + 0.075.
PROBS = np.array([[0.85, 0.10, 0.05], [0.05, 0.85, 0.10], [0.65, 0.20, 0.15], [0.20, 0.15, 0.65]])
TARGETS = np.array([0, 0, 0, 1])


def test_ece_and_bins_match_the_hand_computation():
    bins = calibration_bins(PROBS, TARGETS)
    assert bins["n_bins"] == 10
    assert bins["count"] == [0, 0, 0, 0, 0, 0, 2, 0, 2, 0]
    assert bins["confidence_sum"][8] == pytest.approx(1.7) and bins["correct_sum"][8] == 1
    assert bins["confidence_sum"][6] == pytest.approx(1.3) and bins["correct_sum"][6] == 1
    assert expected_calibration_error(bins) == pytest.approx(0.25, abs=1e-12)
    assert classification_metrics(PROBS, TARGETS)["ece"] == pytest.approx(0.25, abs=1e-12)


def test_ece_with_two_bins():
    bins = calibration_bins(PROBS, TARGETS, n_bins=2)
    assert bins["count"] == [0, 4]
    # One bin with accuracy 2/4 and mean confidence 0.75.
    assert expected_calibration_error(bins) == pytest.approx(0.25, abs=1e-12)


def test_headline_metrics_from_scores_calibration_from_probs():
    m = classification_metrics(PROBS, TARGETS)
    assert m["nll"] == pytest.approx(-np.mean(np.log([0.85, 0.05, 0.65, 0.15])), abs=1e-12)
    assert m["accuracy"] == 0.5
    # Algorithm 1: labels from head(mean z(T)) logits, calibration from the MC predictive distribution.
    logits = np.log(PROBS[[0, 0, 2, 3]])
    m2 = classification_metrics(PROBS, TARGETS, logits)
    assert m2["accuracy"] == 0.75 and m2["nll"] == m["nll"] and m2["ece"] == m["ece"]
    assert set(m) == {"accuracy", "nll", "ece"}
    with pytest.raises(ValueError, match=r"scores must have shape \(N, 3\)"):
        classification_metrics(PROBS, TARGETS, np.zeros((4, 2)))


def test_nll_is_clipped_at_1e_12():
    m = classification_metrics(np.array([[1.0, 0.0], [1.0, 0.0]]), np.array([0, 1]))
    assert m["nll"] == pytest.approx(-math.log(1e-12) / 2)


def test_top5_accuracy():
    probs = np.array([[0.30, 0.25, 0.20, 0.15, 0.06, 0.04], [0.30, 0.25, 0.20, 0.15, 0.06, 0.04]])
    m = classification_metrics(probs, np.array([4, 5]), top5=True)
    assert m["top5_accuracy"] == 0.5
    # The point predictor ranks class 5 above class 1 for the second example: top-5 follows the scores.
    scores = np.log(probs)
    scores[1, 5] = 10.0
    assert classification_metrics(probs, np.array([4, 5]), scores, top5=True)["top5_accuracy"] == 1.0
    with pytest.raises(ValueError, match="at least 5 classes"):
        classification_metrics(PROBS, TARGETS, top5=True)


def test_binary_auroc_and_equivalent_shapes():
    p1 = np.array([0.1, 0.4, 0.35, 0.8])
    y = np.array([0, 0, 1, 1])
    # Positive-negative pairs ranked correctly: (0.35>0.1), (0.8>0.1), (0.8>0.4) of 4.
    m = classification_metrics(p1, y)
    assert m["auroc"] == pytest.approx(0.75)
    assert m["accuracy"] == 0.75
    assert m["nll"] == pytest.approx(-np.mean(np.log([0.9, 0.6, 0.35, 0.8])))
    for same in (p1[:, None], np.stack([1 - p1, p1], 1), torch.tensor(p1)):
        assert classification_metrics(same, y) == pytest.approx(m)
    logit = torch.tensor([-1.0, 2.0, 3.0, 1.0])
    m2 = classification_metrics(p1, y, logit)
    # Labels 0,1,1,1 from the logit's sign; AUROC from its ranking: (3>-1), (3>2), (1>-1), not (1>2).
    assert m2["accuracy"] == 0.75 and m2["auroc"] == pytest.approx(0.75) and m2["nll"] == m["nll"]
    assert classification_metrics(p1, y, torch.tensor([-1.0, -2.0, 3.0, 1.0]))["auroc"] == 1.0
    assert classification_metrics(p1, y, torch.sigmoid(logit)[:, None] - 0.5)["auroc"] == m2["auroc"]
    assert math.isnan(classification_metrics(p1, np.ones(4, dtype=int))["auroc"])


def test_uncertainty_is_the_mean_covariance_trace_and_entropy():
    z_var = np.array([[0.5, 1.0], [0.0, 0.5], [0.0, 0.0], [2.0, 0.0]])
    u = uncertainty_metrics(PROBS, z_var)
    assert u["z_cov_trace"] == pytest.approx((1.5 + 0.5 + 0.0 + 2.0) / 4)
    entropy = [-(p * np.log(p)).sum() for p in PROBS]
    assert u["predictive_entropy"] == pytest.approx(np.mean(entropy))
    binary = uncertainty_metrics(np.array([0.5, 1.0]), np.zeros((2, 3)))
    assert binary == pytest.approx({"z_cov_trace": 0.0, "predictive_entropy": math.log(2) / 2})
    with pytest.raises(ValueError, match="z_var must have shape"):
        uncertainty_metrics(PROBS, np.zeros(4))


def test_merge_bins_adds_counts():
    a, b = calibration_bins(PROBS[:2], TARGETS[:2]), calibration_bins(PROBS[2:], TARGETS[2:])
    merged, whole = merge_calibration_bins([a, b]), calibration_bins(PROBS, TARGETS)
    assert merged["n_bins"] == 10 and merged["count"] == whole["count"]
    for key in ("confidence_sum", "correct_sum"):
        assert merged[key] == pytest.approx(whole[key])
    with pytest.raises(ValueError, match="different n_bins"):
        merge_calibration_bins([a, calibration_bins(PROBS, TARGETS, n_bins=5)])


def test_bad_inputs_name_the_problem():
    with pytest.raises(ValueError, match=r"targets must have shape \(4,\)"):
        classification_metrics(PROBS, TARGETS[:3])
    with pytest.raises(ValueError, match=r"targets must lie in \[0, 2\]"):
        classification_metrics(PROBS, np.array([0, 1, 2, 3]))
    with pytest.raises(ValueError, match="n_bins"):
        calibration_bins(PROBS, TARGETS, n_bins=0)
