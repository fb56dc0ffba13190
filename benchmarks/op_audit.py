"""What a piece of torch code dispatches, read on CPU tensors: every aten op with its output
shapes, and the calls that would make a GPU wait for the host or read data-dependent shapes.

    with OpAudit() as audit:
        loss = model(**batch)["loss"]
    audit.syncs        # [(op or call, where)] that would synchronize host and GPU
    audit.trace()      # [(op, output shapes)] in dispatch order

A `TorchDispatchMode` sees every aten op (so `float(t)`, `t.item()` and `if t:` show up as
`_local_scalar_dense`, boolean-mask indexing as `nonzero`); a `TorchFunctionMode` sees the
Python-level calls that read tensors on the host or build them from Python data (`tolist`,
`cpu`, `numpy`, `torch.tensor`, ...), which dispatch nothing on a CPU tensor.
"""

import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

# aten ops that read a device tensor on the host or make an output whose shape depends on data.
SYNCING_OPS = {
    "_local_scalar_dense",  # .item(), float(), int(), bool(), `if tensor:`
    "nonzero",
    "masked_select",
    "masked_scatter",
    "_unique",
    "_unique2",
    "unique_consecutive",
    "unique_dim",
    "equal",
    "is_nonzero",
    "_coalesce",
    "coalesce",
    "repeat_interleave",  # (without output_size)
    "lift_fresh",  # a tensor from Python data (torch.tensor(list)): a host-to-device copy
}
# Python-level calls that read a tensor on the host or take host data, and that dispatch no
# syncing op on a CPU tensor (`item`, `float`, `torch.tensor`, ... do: they are seen as aten ops).
SYNCING_CALLS = {
    torch.Tensor.tolist: "tolist",
    torch.Tensor.cpu: "cpu",
    torch.Tensor.numpy: "numpy",
}
BOOL_INDEXED_OPS = {"index", "index_put", "index_put_", "_index_put_impl_"}
HERE = str(Path(__file__).resolve().parent.parent)


@dataclass(frozen=True)
class Op:
    """One dispatched aten op: its name (`aten.mm`), output shapes, and why it syncs (or None)."""

    name: str
    shapes: tuple[tuple[int, ...], ...]
    sync: Optional[str]
    phase: str
    where: str


def output_shapes(output: Any) -> tuple[tuple[int, ...], ...]:
    return tuple(tuple(leaf.shape) for leaf in tree_leaves(output) if torch.is_tensor(leaf))


def has_bool_index(args: Sequence[Any]) -> bool:
    return any(
        torch.is_tensor(leaf) and leaf.dtype == torch.bool for leaf in tree_leaves(list(args))
    )


def caller() -> str:
    """file:line of the innermost frame outside torch (and outside this file)."""
    for frame in reversed(traceback.extract_stack()):
        if "/torch/" not in frame.filename and frame.filename != __file__:
            path = frame.filename
            return f"{path[len(HERE) + 1 :] if path.startswith(HERE) else path}:{frame.lineno}"
    return "?"


class _Dispatch(TorchDispatchMode):
    def __init__(self, audit: "OpAudit") -> None:
        super().__init__()
        self.audit = audit

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        output = func(*args, **(kwargs or {}))
        name = func.overloadpacket.__name__
        sync = None
        if name in SYNCING_OPS:
            sync = name
        elif name in BOOL_INDEXED_OPS and has_bool_index(args[1:]):
            sync = f"{name} with a boolean mask"
        self.audit.add(f"aten.{name}", output_shapes(output), sync)
        return output


class _Function(TorchFunctionMode):
    def __init__(self, audit: "OpAudit") -> None:
        super().__init__()
        self.audit = audit

    def __torch_function__(self, func, types, args=(), kwargs=None):
        call = SYNCING_CALLS.get(func)
        if call is not None:
            self.audit.add(call, (), call)
        return func(*args, **(kwargs or {}))


@dataclass
class OpAudit:
    """Records the ops run inside `with`; `phase` names what runs now ("forward", ...)."""

    ops: list[Op] = field(default_factory=list)
    phase: str = ""
    _modes: list[Any] = field(default_factory=list)

    def add(self, name: str, shapes: tuple[tuple[int, ...], ...], sync: Optional[str]) -> None:
        where = caller() if sync is not None else ""
        self.ops.append(Op(name, shapes, sync, self.phase, where))

    def __enter__(self) -> "OpAudit":
        self._modes = [_Function(self), _Dispatch(self)]
        for mode in self._modes:
            mode.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        for mode in reversed(self._modes):
            mode.__exit__(*exc)

    def run(self, phase: str, function: Callable[[], Any]) -> Any:
        """`function()` recorded as `phase`."""
        self.phase = phase
        return function()

    def of(self, *phases: str) -> list[Op]:
        return [op for op in self.ops if not phases or op.phase in phases]

    def syncs(self, *phases: str) -> list[Op]:
        """The ops of these phases (all without any) that would synchronize on a GPU."""
        return [op for op in self.of(*phases) if op.sync is not None]

    def trace(self, *phases: str) -> list[tuple[str, tuple[tuple[int, ...], ...]]]:
        """(op, output shapes) in order: the same for two batches of one shape means the step
        runs the same kernels on the same shapes whatever the data."""
        return [(op.name, op.shapes) for op in self.of(*phases) if op.name.startswith("aten.")]

    def counts(self) -> dict[str, dict[str, int]]:
        """Per phase: aten ops and syncing ops."""
        phases = dict.fromkeys(op.phase for op in self.ops)
        return {
            phase: {"ops": len(self.trace(phase)), "syncs": len(self.syncs(phase))}
            for phase in phases
        }
