"""The unregularized model: the baseline of every t-test."""
from ndebench.regularizers.base import Regularizer
from ndebench.regularizers.registry import register_regularizer


@register_regularizer("none", summary="No regularization (the baseline of every significance test)")
class NoRegularizer(Regularizer):
    """Leaves the latent dynamics untouched."""
