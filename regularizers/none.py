"""The unregularized model: the baseline of every t-test, optionally averaged over MC passes as a control."""
from __future__ import annotations

from typing import Any

from ndebench.regularizers.base import Regularizer
from ndebench.regularizers.catalog import BUILTINS
from ndebench.regularizers.registry import register_regularizer

BASELINE = "none"


@register_regularizer(
    BASELINE,
    display="None",
    summary="No regularization (the baseline of every significance test); n_mc > 1: MC-averaged control cell",
    hyperparams=BUILTINS[BASELINE].hyperparams,
)
class NoRegularizer(Regularizer):
    """Leaves the latent dynamics untouched.

    With ``n_mc = N > 1`` the model predicts as Algorithm 1 does, ``head(mean_j z_j(T))`` over N passes:
    for an SDE model that averages N Brownian paths, so ``none`` with ``n_mc = 5`` is the control cell for
    Continuum Dropout's 5-pass average. A deterministic model gives N identical passes. The regularizer
    itself stays off at test time (``test_time = "deterministic"``): only the model's own noise varies.
    """

    capturable = True

    def __init__(self, n_mc: int = 1):
        super().__init__()
        self.n_mc = int(n_mc)

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "n_mc": self.n_mc}
