"""Regularizers that act through layers placed inside the model's vector-field MLP (TA-BN, naive drift dropout)."""
from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, ClassVar

from ndebench.regularizers.base import Regularizer
from torch import nn

if TYPE_CHECKING:
    from ndebench.models.registry import ModelInfo


class FieldLayerRegularizer(Regularizer):
    """Collects the layers it hands to the model's ``FieldMLP`` through the ``field_layer`` hook.

    Subclasses implement ``make_layer(num_features)`` and read :attr:`layers` when they draw; ``label`` names
    the regularizer in its errors. Register them with ``incompatible=needs_field_layers(...)``.
    """

    label: ClassVar[str]
    stack_blocker = ("its layers sit in each member's own vector-field MLP, which a stack's batched field does not "
                     "call")

    def __init__(self) -> None:
        super().__init__()
        self._layers: list[nn.Module] = []

    def make_layer(self, num_features: int) -> nn.Module:
        raise NotImplementedError

    def field_layer(self, num_features: int) -> nn.Module:
        layer = self.make_layer(num_features)
        self._layers.append(layer)
        return layer

    @property
    def layers(self) -> list[nn.Module]:
        """The layers placed so far; a model with none cannot be regularized this way (``RuntimeError``)."""
        if not self._layers:
            raise RuntimeError(f"{self.label}: the model's vector field has no field_layer hook (no FieldMLP)")
        return self._layers


def needs_field_layers(what: str) -> Callable[[ModelInfo], str | None]:
    """The compatibility predicate of a field-layer regularizer: a model whose vector fields take no field
    layers (``ModelInfo.field_layers``) gives ``what`` nothing to act on."""

    def incompatible(model: ModelInfo) -> str | None:
        if model.field_layers:
            return None
        return f"its vector field has no hidden MLP layer (no field_layer hook) for {what} to act on"

    return incompatible
