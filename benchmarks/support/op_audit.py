"""What a piece of torch code dispatches, read on CPU tensors: every aten op with its output
shapes, and the calls that would make a GPU wait for the host or read data-dependent shapes.

    with OpAudit() as audit:
        loss = model(**batch)["loss"]
    audit.syncs        # [(op or call, where)] that would synchronize host and GPU
    audit.trace()      # [(op, output shapes)] in dispatch order

A `TorchDispatchMode` sees every aten op (so `float(t)`, `t.item()` and `if t:` show up as
`_local_scalar_dense`, boolean-mask indexing as `nonzero`). A `TorchFunctionMode` sees the
Python-level calls that read tensors on the host or build them from Python data (`tolist`,
`cpu`, `numpy`, `torch.tensor`, ...), which dispatch nothing on a CPU tensor.
"""

import re
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Optional

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from benchmarks.support.common import REPO_ROOT

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
CONSTRUCTORS = {torch.tensor, torch.as_tensor, torch.zeros, torch.ones, torch.full, torch.empty}
BOOL_INDEXED_OPS = {"index", "index_put", "index_put_", "_index_put_impl_"}
# torch's own frames that recording adds (modes, dispatch), not where an op comes from
AUDIT_FRAMES = re.compile(r"/torch/(_dynamo|utils|overrides\.py|_ops\.py|_tensor\.py|_compile\.py)")


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


def has_sparse(args: Sequence[Any], output: Any) -> bool:
    """Whether a sparse COO tensor goes in or comes out: its kernels coalesce (a data-dependent
    number of rows) below the dispatcher, where no op shows it."""
    leaves = tree_leaves([list(args), output])
    return any(torch.is_tensor(leaf) and leaf.layout == torch.sparse_coo for leaf in leaves)


def short(frame: traceback.FrameSummary) -> str:
    path = frame.filename
    if path.startswith(f"{REPO_ROOT}/"):
        path = path[len(f"{REPO_ROOT}/") :]
    elif "/site-packages/" in path:
        path = path.split("/site-packages/")[-1]
    return f"{path}:{frame.lineno}"


def caller() -> str:
    """file:line of the innermost frame outside torch (and outside this file), followed by the
    innermost torch frame when the op comes from inside torch (an optimizer, autograd)."""
    frames = [f for f in traceback.extract_stack() if f.filename != __file__]
    inside = [f for f in frames if "/torch/" in f.filename and not AUDIT_FRAMES.search(f.filename)]
    outside = [f for f in frames if "/torch/" not in f.filename]
    where = short(outside[-1]) if outside else "?"
    if inside and (not outside or frames.index(inside[-1]) > frames.index(outside[-1])):
        where += f" > {short(inside[-1])}"
    return where


class _Dispatch(TorchDispatchMode):
    def __init__(self, audit: "OpAudit") -> None:
        super().__init__()
        self.audit = audit

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        output = func(*args, **(kwargs or {}))
        name = func.overloadpacket.__name__
        inputs = [leaf for leaf in tree_leaves([list(args), kwargs]) if torch.is_tensor(leaf)]
        sync = None
        if self.audit.explicit_host or (inputs and all(map(self.audit.is_host, inputs))):
            self.audit.on_host(output)  # host work on host tensors: no GPU involved
        elif name in SYNCING_OPS:
            sync = name
        elif name in BOOL_INDEXED_OPS and has_bool_index(args[1:]):
            sync = f"{name} with a boolean mask"
        elif has_sparse(args, output):
            sync = f"{name} of a sparse tensor"
        self.audit.add(f"aten.{name}", output_shapes(output), sync)
        return output


class _Function(TorchFunctionMode):
    def __init__(self, audit: "OpAudit") -> None:
        super().__init__()
        self.audit = audit

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        call = SYNCING_CALLS.get(func)
        if call is not None:
            self.audit.add(call, (), call)
        # a tensor placed on the CPU on purpose (e.g. an optimizer's step counter) stays there
        explicit = func in CONSTRUCTORS and str(kwargs.get("device")) == "cpu"
        self.audit.explicit_host += explicit
        try:
            return func(*args, **kwargs)
        finally:
            self.audit.explicit_host -= explicit


@dataclass
class OpAudit:
    """Records the ops run inside `with`; `phase` names what runs now ("forward", ...).

    `host` holds the storages of tensors that stay on the host in a GPU run too (an optimizer's
    CPU step counters: `on_host`), with the tensors made from them and those made on the CPU on
    purpose (`device="cpu"`); ops on them alone are host work, never a sync."""

    ops: list[Op] = field(default_factory=list)
    phase: str = ""
    host: set[int] = field(default_factory=set)
    explicit_host: int = 0
    _modes: list[Any] = field(default_factory=list)
    _depth: int = 0

    def on_host(self, tensors: Any) -> None:
        for leaf in tree_leaves(tensors):
            if torch.is_tensor(leaf) and leaf.layout == torch.strided:
                self.host.add(leaf.untyped_storage().data_ptr())

    def is_host(self, tensor: torch.Tensor) -> bool:
        return tensor.layout == torch.strided and tensor.untyped_storage().data_ptr() in self.host

    def add(self, name: str, shapes: tuple[tuple[int, ...], ...], sync: Optional[str]) -> None:
        where = caller() if sync is not None else ""
        self.ops.append(Op(name, shapes, sync, self.phase, where))

    def __enter__(self) -> "OpAudit":
        """Records until the matching exit; re-entering (`run` inside `with`) records once."""
        if not self._modes:
            self._modes = [_Function(self), _Dispatch(self)]
            for mode in self._modes:
                mode.__enter__()
        self._depth += 1
        return self

    def __exit__(self, *exc: Any) -> None:
        self._depth -= 1
        if not self._depth:
            for mode in reversed(self._modes):
                mode.__exit__(*exc)
            self._modes = []

    def run(self, phase: str, function: Callable[[], Any]) -> Any:
        """`function()` recorded as `phase`."""
        self.phase = phase
        with self:
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


def host_step_counters(optimizer: torch.optim.Optimizer) -> list[torch.Tensor]:
    """The step counts a torch optimizer keeps on the CPU (unless fused or capturable), on a GPU
    too: what `OpAudit.on_host` takes."""
    return [
        state["step"]
        for group in optimizer.param_groups
        if not group.get("fused") and not group.get("capturable")
        for parameter in group["params"]
        for state in [optimizer.state.get(parameter, {})]
        if torch.is_tensor(state.get("step"))
    ]
