"""Whether a stack's batched solve rounds as its members' solves alone (:func:`rounds_alone`): where it does not,
the stack runs each member's layers alone (``exact``), so that no ulp reaches a decision (docs/protocol.md)."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from ndebench.models.base import cat_inputs, repeat_batch
from ndebench.models.integrate import TrialRNG
from ndebench.models.rowkernel import OWN_LAYERS


def rounds_alone(stack: Any, members: Sequence[Any]) -> bool:
    """Whether ``stack``'s batched solve (a :class:`~ndebench.platform.worker.stack.Stack`) gives every member of
    ``members`` its own ``z(T)`` and its own gradient of ``|z(T)|^2`` in its latent layers bit for bit, on its first
    and last training batches, and its own ``z(T)`` of its ``n_mc`` evaluation passes on the first and last
    batches of validation and test (torch picks its matrix kernels by shape and by a block's alignment in memory,
    and a batched one can sum in another order than a member's alone; a difference of one ulp grows about tenfold
    per epoch of training)."""
    def ends(split: str) -> list[list[Any]]:
        batches = [list(m.built.feeds[split].batches(m.built.batch_size, None)) for m in members]
        return [[b[i] for b in batches] for i in sorted({0, len(batches[0]) - 1})]

    trained = all(_rounds_alone(stack, members, batches) for batches in ends("train"))
    return trained and all(_evaluates_alone(stack, members, batches) for split in ("val", "test")
                           for batches in ends(split))


@torch.no_grad()
def _evaluates_alone(stack: Any, members: Sequence[Any], batches: list[Any]) -> bool:
    n = members[0].built.model.n_mc()
    for m in members:
        m.built.model.eval()
    inputs = [repeat_batch(b[0], n) for b in batches]
    alone = [m.built.model.latent(x, TrialRNG.for_evaluation(m.spec.seed)) for m, x in zip(members, inputs,
                                                                                            strict=True)]
    stacked = stack.latent(members, cat_inputs(inputs), [TrialRNG.for_evaluation(m.spec.seed) for m in members])
    return torch.equal(stacked, torch.cat(alone))


def _rounds_alone(stack: Any, members: Sequence[Any], batches: list[Any]) -> bool:
    models = [m.built.model for m in members]
    weights = [[p for name, p in model.named_parameters() if name.split(".")[0] not in OWN_LAYERS]
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
