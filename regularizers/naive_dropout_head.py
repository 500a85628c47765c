"""Naive dropout on the classifier input (the head's own dropout layer)."""
from __future__ import annotations

from typing import Any

from ndebench.regularizers.base import Regularizer
from ndebench.regularizers.catalog import BUILTINS
from ndebench.regularizers.registry import register_regularizer


@register_regularizer(
    "naive_dropout_head",
    display="Naive Dropout (MLP classifier)",
    summary="Standard dropout with rate p in the MLP classifier head (replaces its default 0.1); off at test",
    hyperparams=BUILTINS["naive_dropout_head"].hyperparams,
)
class NaiveDropoutHead(Regularizer):
    """``Linear -> BatchNorm -> ReLU -> Dropout(p) -> Linear`` head; the latent dynamics are untouched.

    Every model's head already has the reference pipeline's ``Dropout(0.1)``; this regularizer sets its
    rate to ``p`` (``head_dropout``). It is ``torch.nn.Dropout``, so its masks come from torch's global RNG,
    which the trial seeds; it is off in eval mode (deterministic test protocol).
    """

    stochastic = True

    def __init__(self, p: float = 0.3):
        super().__init__()
        self.p = float(p)
        self.head_dropout = self.p

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "p": self.p}
