"""Whether a stack's batched solve rounds as its members' solves alone (:func:`rounds_alone`): where it does not,
the stack runs each member's layers alone (``exact``), so that no ulp reaches a decision (docs/protocol.md)."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from ndebench.models.base import cat_inputs
from ndebench.models.integrate import TrialRNG


def rounds_alone(stack: Any, members: Sequence[Any]) -> bool:
    """Whether ``stack``'s batched solve (a :class:`~ndebench.platform.worker.stack.Stack`) gives every member of
    ``members`` its own ``z(T)`` and its own gradient of ``|z(T)|^2`` in its latent layers bit for bit, on its first
    and last training batches (torch picks its matrix kernels by shape, and a batched one can sum in another order
    than a member's alone; a difference of one ulp grows about tenfold per epoch of training)."""
    shapes = [list(m.built.feeds["train"].batches(m.built.batch_size, None)) for m in members]
    return all(_rounds_alone(stack, members, [b[i] for b in shapes]) for i in {0, len(shapes[0]) - 1})


def _rounds_alone(stack: Any, members: Sequence[Any], batches: list[Any]) -> bool:
    models = [m.built.model for m in members]
    weights = [[p for name, p in model.named_parameters() if name.split(".")[0] not in ("head", "regularizer")]
               for model in models]
    with torch.enable_grad():
        alone = [model.latent(b[0], TrialRNG.for_evaluation(m.spec.seed))
                 for model, m, b in zip(models, members, batches, strict=True)]
        grads = [g for z, w in zip(alone, weights, strict=True)
                 for g in torch.autograd.grad(z.square().sum(), w, allow_unused=True)]
        stacked = stack.latent(members, cat_inputs([b[0] for b in batches]),
                               [TrialRNG.for_evaluation(m.spec.seed) for m in members])
        together = torch.autograd.grad(stacked.square().sum(), [p for w in weights for p in w], allow_unused=True)
    return torch.equal(stacked.detach(), torch.cat(alone).detach()) and all(
        (a is None) == (b is None) and (a is None or torch.equal(a, b)) for a, b in zip(grads, together, strict=True))
