"""The layers of a stack's shared solve: K members' ``nn.Linear`` or ``nn.GRUCell`` on a member-major batch
``(K * B, ...)``, member k's rows through member k's own layer.

Each stacked layer takes its weights either from the members' models (:meth:`gather`, the batched eager stack)
or from the stacked leaves ``(K, *shape)`` of a region (:meth:`use`,
:class:`~ndebench.platform.worker.stackgraph.StackedWeights`). Batched (the default): one ``torch.baddbmm``
per product of ``(K, B * ..., in)`` by the members' weights. Exact: each member's own layer on its rows, the
kernel of the member alone (bit for bit on the CPU) at the price of K calls and K autograd nodes per layer and
solver step. Which models a stack can hold (:func:`unstackable`) and the kernel their trials take alone so that a
batched stack rounds as they do (:func:`with_stack_kernel`) are decided here too.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from ndebench.models.base import NDEClassifier
from ndebench.models.graphs import CAPTURED
from ndebench.models.rowkernel import OWN_LAYERS, use_row_kernel
from torch import nn

Leaf = Callable[[str], "torch.Tensor | None"]


def members_rows(x: torch.Tensor, k: int) -> list[torch.Tensor]:
    """The K members' row blocks of ``x`` ``(K * B, ...)``, each in its own allocation: a view at another offset
    can take another matrix kernel (alignment) and round otherwise than the member's tensor alone (measured: the
    second member of a Neural ODE stack, 3e-5 relative in the validation NLL after one epoch)."""
    return [rows.clone() for rows in x.chunk(k)]


def _batched(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """Member k's rows of ``x`` ``(K * B, ..., in)`` times ``weight[k]`` ``(in, out)`` plus ``bias[k]`` ``(1, out)``."""
    rows = x.reshape(weight.shape[0], -1, x.shape[-1])
    return torch.baddbmm(bias, rows, weight).reshape(*x.shape[:-1], weight.shape[-1])


def _bias(bias: torch.Tensor | None, weight: torch.Tensor) -> torch.Tensor:
    """The stacked ``(K, 1, out)`` bias of stacked weights ``(K, out, in)`` (zeros for a layer without one)."""
    return (bias if bias is not None else weight.new_zeros(weight.shape[:2])).unsqueeze(1)


class StackedLinear(nn.Module):
    """K members' ``nn.Linear(in, out)``: member k's rows through ``W_k x + b_k``; each member's gradient reaches
    its own parameters. Measured on the quickstart's Neural CDE (2-core CPU, 5 members): a stacked training epoch
    costs 1.9x one member's alone batched, 3.0x exact.

    :meth:`weight_times` is ``W_k @ y`` on member k's rows, for a model that multiplies by a layer's weight
    itself (ANCDE's time-wise attention)."""

    def __init__(self, name: str, exact: bool):
        super().__init__()
        self.name, self.exact = name, exact
        self.layers: list[nn.Linear] = []
        self.weight: torch.Tensor | None = None  # (K, in, out)
        self.bias: torch.Tensor | None = None  # (K, 1, out)

    def gather(self, models: Sequence[nn.Module]) -> None:
        self.layers = [m.get_submodule(self.name) for m in models]
        if not self.exact:
            self.use(_stacked(self.layers))

    def use(self, leaf: Leaf) -> None:
        weight = leaf("weight")
        assert weight is not None
        self.weight, self.bias = weight.transpose(1, 2), _bias(leaf("bias"), weight)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.exact:
            return torch.cat([layer(rows) for rows, layer in zip(members_rows(x, len(self.layers)), self.layers,
                                                                 strict=True)])
        assert self.weight is not None and self.bias is not None, "gather() or use() before forward"
        return _batched(x, self.weight, self.bias)

    def weight_times(self, y: torch.Tensor) -> torch.Tensor:
        """``W_k @ y_b`` for each row ``b`` of member k: ``y`` ``(K * B, in, n)`` -> ``(K * B, out, n)``."""
        if self.exact:
            return torch.cat([layer.weight @ rows
                              for rows, layer in zip(members_rows(y, len(self.layers)), self.layers, strict=True)])
        assert self.weight is not None, "gather() or use() before forward"
        k = self.weight.shape[0]
        own = self.weight.transpose(1, 2).unsqueeze(1)  # (K, 1, out, in)
        return (own @ y.reshape(k, -1, *y.shape[1:])).reshape(y.shape[0], -1, y.shape[-1])


def _stacked(layers: Sequence[nn.Module]) -> Leaf:
    """The members' parameter of a name stacked on a leading member axis (``None`` where the layers have none)."""
    return lambda p: torch.stack([getattr(layer, p) for layer in layers]) if getattr(layers[0], p) is not None else None


class StackedGRUCell(nn.Module):
    """K members' ``nn.GRUCell(in, H)`` on ``x`` ``(K * B, in)`` and ``h`` ``(K * B, H)``: torch's GRU cell,
    ``r = sigmoid(W_ir x + b_ir + W_hr h + b_hr)``, ``z = sigmoid(W_iz x + b_iz + W_hz h + b_hz)``,
    ``n = tanh(W_in x + b_in + r * (W_hn h + b_hn))``, ``h' = (1 - z) * n + z * h``, with member k's weights on
    its rows (batched: two ``baddbmm`` and the gates; exact: each member's own cell, torch's fused kernel)."""

    def __init__(self, name: str, exact: bool):
        super().__init__()
        self.name, self.exact = name, exact
        self.layers: list[nn.GRUCell] = []
        self.weights: tuple[torch.Tensor, ...] = ()

    def gather(self, models: Sequence[nn.Module]) -> None:
        self.layers = [m.get_submodule(self.name) for m in models]
        if not self.exact:
            self.use(_stacked(self.layers))

    def use(self, leaf: Leaf) -> None:
        w_ih, w_hh = leaf("weight_ih"), leaf("weight_hh")
        assert w_ih is not None and w_hh is not None
        self.weights = (w_ih.transpose(1, 2), _bias(leaf("bias_ih"), w_ih), w_hh.transpose(1, 2),
                        _bias(leaf("bias_hh"), w_hh))

    def forward(self, x: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
        if self.exact:
            return torch.cat([layer(xk, hk) for xk, hk, layer in zip(members_rows(x, len(self.layers)),
                                                                     members_rows(h, len(self.layers)), self.layers,
                                                                     strict=True)])
        w_ih, b_ih, w_hh, b_hh = self.weights
        i_r, i_z, i_n = _batched(x, w_ih, b_ih).chunk(3, dim=-1)
        h_r, h_z, h_n = _batched(h, w_hh, b_hh).chunk(3, dim=-1)
        r, z = torch.sigmoid(i_r + h_r), torch.sigmoid(i_z + h_z)
        n = torch.tanh(i_n + r * h_n)
        return (1 - z) * n + z * h


class StackedScalars:
    """The scalar (0-dim) parameters of a module (e.g. an SDE diffusion's ``theta``) for K members: in the stacked
    model the module holds, in place of each, a tensor ``(K * B, 1)`` whose rows ``k * B ... (k + 1) * B - 1``
    are member k's value, set before every call from the rows of the call's first batched argument (a forward
    pre-hook), so a scalar that scales a ``(K * B, H)`` tensor scales member k's rows by member k's own. The
    stack's first check (:meth:`~ndebench.platform.worker.stack.Stack.mismatch`) catches a module that uses its
    scalar any other way."""

    def __init__(self, name: str, module: nn.Module):
        self.name, self.module = name, module
        self.names = [n for n, _ in module.named_parameters(recurse=False)]
        for attr in self.names:
            delattr(module, attr)
        self.values: list[torch.Tensor] = []
        module.register_forward_pre_hook(self._expand)

    def gather(self, models: Sequence[nn.Module]) -> None:
        self.values = [torch.stack([m.get_submodule(self.name).get_parameter(attr) for m in models])
                       for attr in self.names]

    def use(self, leaf: Leaf) -> None:
        self.values = [leaf(attr) for attr in self.names]  # type: ignore[misc]

    def _expand(self, module: nn.Module, args: tuple[object, ...]) -> None:
        rows = next(a.shape[0] for a in args if isinstance(a, torch.Tensor) and a.dim() > 0)
        for attr, values in zip(self.names, self.values, strict=True):
            own = torch.repeat_interleave(values, rows // values.shape[0], output_size=rows)
            setattr(module, attr, own.unsqueeze(-1))


def stackable(module: nn.Module) -> bool:
    """Whether a stack holds ``module`` with one set of weights per member: an ``nn.Linear``, an ``nn.GRUCell``
    or a module whose own parameters are all scalars (:class:`StackedScalars`)."""
    own = [p for _, p in module.named_parameters(recurse=False)]
    return isinstance(module, (nn.Linear, nn.GRUCell)) or bool(own) and all(p.dim() == 0 for p in own)


def stack_layers(model: nn.Module, exact: bool) -> list[StackedLinear | StackedGRUCell | StackedScalars]:
    """Make ``model`` (a stack's copy of its first member's model) the stacked one: every ``nn.Linear`` and
    ``nn.GRUCell`` outside its regularizer replaced by its stacked counterpart, every module's scalar parameters
    held per member's rows; the stacked layers, whose weights :meth:`gather` or :meth:`use` set before a pass."""
    layers: list[StackedLinear | StackedGRUCell | StackedScalars] = []
    for name, module in list(model.named_modules()):
        if name.startswith("regularizer") or not stackable(module):
            continue
        if isinstance(module, (nn.Linear, nn.GRUCell)):
            stacked = (StackedLinear if isinstance(module, nn.Linear) else StackedGRUCell)(name, exact)
            parent, _, attr = name.rpartition(".")
            setattr(model.get_submodule(parent), attr, stacked)
            layers.append(stacked)
        else:
            layers.append(StackedScalars(name, module))
    return layers


def unstackable(model: NDEClassifier) -> str | None:
    """Why ``model``'s latent solve cannot be stacked (``None``: it can): every module outside the head and the
    regularizer must be an ``nn.Linear`` or ``nn.GRUCell``, hold only scalar parameters, or hold no parameters or
    buffers of its own (the root's ``times`` aside), an SDE's Brownian motion must be torchsde's (a captured
    solve draws its increments from a device generator as one tensor, which no stack can split into the
    members'), and the regularizer must act through its draws alone (its ``stack_blocker``)."""
    if model.regularizer.stack_blocker is not None:
        return f"regularizer {type(model.regularizer).__name__}: {model.regularizer.stack_blocker}"
    device = next(model.parameters()).device
    if model.stochastic_latent and model.graph_note(device) == CAPTURED:
        return (f"{type(model).__name__} alone draws its Brownian increments in a captured solve on {device.type}, "
                "one tensor per pass from its own device generator")
    for name, module in model.named_modules():
        if name.split(".")[0] in OWN_LAYERS or stackable(module):
            continue
        own = [n for n, _ in module.named_parameters(recurse=False)]
        own += [n for n, _ in module.named_buffers(recurse=False) if not (name == "" and n == "times")]
        if own:
            return f"module {name or type(model).__name__} ({type(module).__name__}) holds {', '.join(own)}"
    return None


def with_stack_kernel(model: NDEClassifier) -> NDEClassifier:
    """``model`` (on its device) whose latent ``nn.Linear`` layers multiply with the stack's CPU kernel
    (:func:`~ndebench.models.rowkernel.use_row_kernel`) where its trials can stack (:func:`unstackable` is
    ``None``), so a trial alone rounds as a stack's member whatever ``resources.stack`` is; a model that never
    stacks keeps ``F.linear``, cheaper on small products."""
    return use_row_kernel(model) if unstackable(model) is None else model
