"""Evaluation of a trial's model on a split, the training loss, and the tag of the test protocol."""
from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from ndebench.models.base import NDEClassifier, Prediction
from ndebench.models.integrate import TrialRNG
from ndebench.platform.common.metrics import calibration_bins, classification_metrics, uncertainty_metrics
from ndebench.platform.worker.build import Feed


def trial_loss(logits: torch.Tensor, targets: torch.Tensor, pos_weight: float | torch.Tensor | None) -> torch.Tensor:
    """Cross-entropy of logits ``(B, K)`` against targets ``(B,)``; for one logit ``(B, 1)``, binary
    cross-entropy with the dataset's ``pos_weight`` on the positive class (a tensor on the logits' device: no
    copy from the host, as a captured region needs)."""
    if logits.shape[-1] == 1:
        weight = (pos_weight if pos_weight is None or isinstance(pos_weight, torch.Tensor)
                  else torch.tensor(pos_weight, device=logits.device))
        return F.binary_cross_entropy_with_logits(logits[:, 0], targets.float(), pos_weight=weight)
    return F.cross_entropy(logits, targets)


def protocol_tag(model: NDEClassifier) -> str:
    """How the test predictions are made, for the ``ndebench.test_protocol`` tag.

    ``deterministic``: one pass and nothing random in it; ``stochastic-1``: one random pass (an SDE model's
    Brownian noise, or a regularizer kept on at test with ``n_mc = 1``), as Oh et al.'s pipeline evaluates
    SDEs; ``mc<N>``: N random passes averaged (Algorithm 1, or the regularizer's ``point_predictor``).
    """
    random = model.stochastic_latent or (model.regularizer.stochastic and model.regularizer.test_time == "mc")
    if not random:
        return "deterministic"
    return f"mc{model.n_mc()}" if model.n_mc() > 1 else "stochastic-1"


@torch.no_grad()
def evaluate(model: NDEClassifier, feed: Feed, batch_size: int, seed: int, *,
             top5: bool = False, n_mc: int | None = None) -> tuple[dict[str, float], dict[str, Any]]:
    """Metrics of ``model`` on a split with the regularizer's test protocol: ``n_mc`` passes per prediction (default
    the model's :meth:`~ndebench.models.base.NDEClassifier.n_mc`).

    Headline metrics (accuracy, top-5, AUROC) come from the point predictor: Algorithm 1's
    ``head(mean_j z_j(T))`` (``Prediction.logits``), or the MC predictive distribution for a regularizer
    whose ``point_predictor`` is ``mc_probs`` (``jump_diffusion_ttn``, as Liu et al.). NLL, ECE and the
    reliability bins come from the MC predictive distribution (``Prediction.probs``); ``z_cov_trace`` and
    ``predictive_entropy`` are Section 3.3's uncertainty (:func:`uncertainty_metrics`). The MC draws come
    from :meth:`TrialRNG.for_evaluation` of ``seed``, so that every evaluation of the same weights
    gives the same numbers. Returns (metrics, calibration bins).
    """
    model.eval()
    rng = TrialRNG.for_evaluation(seed)
    return score(model, [(model.predict(inputs, rng, n_mc), y) for inputs, y in feed.batches(batch_size, None)],
                 top5=top5)


def score(model: NDEClassifier, predictions: list[tuple[Prediction, torch.Tensor]], *, top5: bool = False
          ) -> tuple[dict[str, float], dict[str, Any]]:
    """The metrics and calibration bins of :func:`evaluate` from a split's predictions, batch by batch
    (``Prediction`` and targets ``(B,)``)."""
    from_probs = model.regularizer.point_predictor == "mc_probs"
    probs, scores, z_var, targets = [], [], [], []
    for pred, y in predictions:
        probs.append(pred.probs.cpu())
        scores.append((pred.probs if from_probs else pred.logits).cpu())
        z_var.append(pred.z_var.cpu())
        targets.append(y.cpu())
    probs_all, targets_all = torch.cat(probs), torch.cat(targets)
    metrics = classification_metrics(probs_all, targets_all, torch.cat(scores), top5=top5)
    metrics.update(uncertainty_metrics(probs_all, torch.cat(z_var)))
    return metrics, calibration_bins(probs_all, targets_all)
