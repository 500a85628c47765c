"""The latent layers' CPU matrix kernel: a trial alone multiplies as a member of a stack of trials does, so that
the stack (``platform/worker/stacklayers.py``: one ``torch.baddbmm`` over the members' axis) can train batched
and still give every member its trial's bits. ``F.linear`` (``addmm``) and a batched product sum in another
order on the CPU, an ulp apart, which training amplifies into another early stop (docs/performance.md). The
worker applies it to the models whose trials can stack (``stacklayers.with_stack_kernel``): on small products its
autograd bookkeeping costs more than ``F.linear``'s."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

OWN_LAYERS = ("head", "regularizer")  # trained per member in a stack, so they keep torch's own kernel


class RowLinear(nn.Linear):
    """``nn.Linear`` (same parameters, state dict and initialisation) whose CPU product is
    ``baddbmm(b, x, W^T)`` with a member axis of 1: ``x`` ``(..., in)`` viewed as ``(1, N, in)``, ``W^T``
    ``(1, in, out)``, ``b`` ``(1, 1, out)``, giving ``(..., out)``; elsewhere (CUDA) and on a 1-D input it is
    ``F.linear``. Member k of a stack of K computes ``baddbmm`` on the ``(K, N, in)`` batch, which on the CPU
    runs the same kernel on each member's ``(N, in)`` slice (the stack checks it bit for bit before training,
    ``platform/worker/stackexact.py``)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.device.type != "cpu" or x.dim() < 2:
            return F.linear(x, self.weight, self.bias)
        weight = self.weight.t().unsqueeze(0)
        bias = self.bias.view(1, 1, -1) if self.bias is not None else x.new_zeros(1, 1, self.out_features)
        return torch.baddbmm(bias, x.reshape(1, -1, self.in_features), weight).reshape(*x.shape[:-1],
                                                                                       self.out_features)


def use_row_kernel(model: nn.Module) -> nn.Module:
    """Make every ``nn.Linear`` of ``model`` outside its head and regularizer a :class:`RowLinear` in place (its
    parameters untouched); returns ``model``."""
    for name, module in model.named_modules():
        if type(module) is nn.Linear and name.split(".")[0] not in OWN_LAYERS:
            module.__class__ = RowLinear
    return model
