"""One full training step of the original configs, read op by op on the CPU: what the GPU step
dispatches and where it would wait for the host.

    python -m benchmarks.step_audit [--batches 2] [--show 12] [--configs lstm transformer]

The configs: `elmo_lstm_original.jsonnet` and `elmo_transformer_original.jsonnet` at shrunk
widths (their structure: clips, dropout, sampled sparse softmax, Adagrad / fused Adam, gradient
clipping), built as `allennlp train` builds them. On the paths a GPU runs (`gpu_path_on_cpu`) and
on the CPU's own, it runs `--batches` steps on the bundled demo corpus under `OpAudit`
(benchmarks/support/op_audit.py). Before them, one step makes what is made once (optimizer state).
A step: the loader's batch moved to the device, forward, backward, gradient clipping (torch's
`clip_grad_norm_`, as allennlp's trainer, without the trainer's own `.item()`) and the optimizer
step. It prints, per config and path, the aten ops per phase, every op that would synchronize a GPU
with the host (op, file:line) and whether two batches dispatch the same (op, output shapes)
sequence; it ends with one JSON line (benchmarks/support/common.py), with `missed` naming a GPU
path that would synchronize or change shapes.
"""

import contextlib
import json
from collections import Counter
from collections.abc import Iterator
from typing import Any

import torch
from allennlp.common import Params
from allennlp.data import DataLoader, DatasetReader, Vocabulary
from allennlp.models import Model
from allennlp.training.optimizers import Optimizer

import elmo_plugin  # noqa: F401  (registers components)
from benchmarks.support.common import (
    CONFIG_DIR,
    REPO_ROOT,
    Declaration,
    benchmark_parser,
    run_benchmark,
)
from benchmarks.support.op_audit import OpAudit, host_step_counters
from elmo_plugin.data.corpus_data_loader import to_device
from elmo_plugin.modules.device_paths import gpu_path_on_cpu

NAME = "step_audit"
CONFIGS = {"lstm": "elmo_lstm_original.jsonnet", "transformer": "elmo_transformer_original.jsonnet"}
DEMO_CORPUS = REPO_ROOT / "fixtures" / "demo_corpus"
# Every size down, the configs' structure kept.
SHRUNK: dict[str, Any] = {
    "model.text_field_embedder.token_embedders.elmo.filters": [[1, 4], [2, 4], [3, 8], [7, 8]],
    "model.text_field_embedder.token_embedders.elmo.projection_dim": 16,
    "model.contextualizer.input_dim": 16,
    "model.num_samples": 64,
    "data_loader.batch_size": 8,
    "data_loader.chunk_bytes": 16 * 1024,
    "data_loader.num_workers": 0,
}
SHRUNK_CONTEXTUALIZER = {
    "lstm": {"model.contextualizer.cell_size": 32},
    "transformer": {
        "model.contextualizer.feedforward_hidden_dim": 32,
        "model.contextualizer.num_layers": 2,
        "model.contextualizer.num_attention_heads": 2,
    },
}
PHASES = ("batch", "forward", "backward", "clip", "optimizer")
CPU = torch.device("cpu")


class AuditedStep:
    """A config's model, loader and optimizer as `allennlp train` builds them, on `device`."""

    def __init__(self, config: str, values: dict[str, Any], device: torch.device = CPU) -> None:
        params = Params.from_file(str(CONFIG_DIR / config), json.dumps(values))
        reader = DatasetReader.from_params(params.pop("dataset_reader"))
        self.loader = DataLoader.from_params(
            params=params.pop("data_loader"),
            reader=reader,
            data_path=str(DEMO_CORPUS / "train" / "*.txt"),
        )
        vocab = Vocabulary.from_params(
            params.pop("vocabulary"), instances=self.loader.iter_instances()
        )
        self.loader.index_with(vocab)
        torch.manual_seed(0)
        self.model = Model.from_params(vocab=vocab, params=params.pop("model")).to(device)
        self.model.train()
        self.device = device
        trainer = params.pop("trainer")
        named = [[name, p] for name, p in self.model.named_parameters() if p.requires_grad]
        self.optimizer = Optimizer.from_params(
            model_parameters=named, params=trainer.pop("optimizer")
        )
        self.grad_norm = trainer.pop("grad_norm", None)
        self.batches: Iterator[dict] = iter(self.loader)

    def step(self, audit: OpAudit) -> None:
        """One step as allennlp's trainer takes it, each part recorded as its phase."""
        batch = next(self.batches)  # collated on the host (no device yet): not recorded
        self.optimizer.zero_grad(set_to_none=True)
        batch = audit.run("batch", lambda: to_device(batch, self.device))  # the loader's copy
        output = audit.run("forward", lambda: self.model(**batch))
        audit.run("backward", lambda: output["loss"].backward())
        if self.grad_norm:
            gradients = [p for p in self.model.parameters() if p.grad is not None]
            audit.run("clip", lambda: torch.nn.utils.clip_grad_norm_(gradients, self.grad_norm))
        audit.on_host(host_step_counters(self.optimizer))
        audit.run("optimizer", self.optimizer.step)


def audit_steps(name: str, gpu_path: bool, batches: int) -> list[OpAudit]:
    """One `OpAudit` per step of config `name` (a key of CONFIGS), on the paths a GPU runs
    (the character CNN's fixed-shape reference, the LSTM's whole-sequence function) where
    `gpu_path`."""
    run = AuditedStep(CONFIGS[name], {**SHRUNK, **SHRUNK_CONTEXTUALIZER[name]})
    with gpu_path_on_cpu() if gpu_path else contextlib.nullcontext():
        run.step(OpAudit())  # first: the optimizer's state and the sampler's table, made once
        audits = []
        for _ in range(batches):
            audit = OpAudit()
            run.step(audit)
            audits.append(audit)
    return audits


def summary(audits: list[OpAudit], show: int) -> dict[str, Any]:
    """Ops and syncs per phase of the first step, the most frequent syncing places, and whether
    every step dispatched the first one's (op, output shapes) sequence."""
    first = audits[0]
    places = Counter(f"{op.name} at {op.where}" for op in first.syncs())
    return {
        "ops": {phase: len(first.trace(phase)) for phase in PHASES},
        "syncs": {phase: len(first.syncs(phase)) for phase in PHASES},
        "fixed_shapes": all(audit.trace() == first.trace() for audit in audits[1:]),
        "sync_places": [f"{count} x {place}" for place, count in places.most_common(show)],
    }


DECLARATION = Declaration(
    quick=["--batches", "2"],
    cheapest=["--configs", "transformer", "--batches", "1"],
    cheapest_status="ok",
)


def main(argv=None) -> dict[str, Any]:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--batches", type=int, default=2, help="steps audited per run")
    parser.add_argument("--show", type=int, default=12, help="syncing places printed per run")
    parser.add_argument("--configs", nargs="+", choices=list(CONFIGS), default=list(CONFIGS))
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    results: dict[str, Any] = {}
    for name in args.configs:
        for path, gpu_path in (("gpu_path", True), ("cpu_defaults", False)):
            result = summary(audit_steps(name, gpu_path, args.batches), args.show)
            results[f"{name}_{path}"] = result
            total_ops, total_syncs = sum(result["ops"].values()), sum(result["syncs"].values())
            print(
                f"{CONFIGS[name]} ({path}): {total_ops} aten ops, {total_syncs} syncing, "
                f"fixed shapes: {result['fixed_shapes']}"
            )
            for phase in PHASES:
                print(f"  {phase:9} {result['ops'][phase]:6} ops {result['syncs'][phase]:4} syncs")
            for place in result["sync_places"]:
                print(f"    {place}")
    missed = [
        f"{key}: {sum(value['syncs'].values())} syncing ops, fixed shapes {value['fixed_shapes']}"
        for key, value in results.items()
        if key.endswith("gpu_path") and (any(value["syncs"].values()) or not value["fixed_shapes"])
    ]
    return {
        "headline": [f"{name}_gpu_path_syncs" for name in args.configs],
        **({"missed": missed} if missed else {}),
        **{f"{key}_ops": sum(value["ops"].values()) for key, value in results.items()},
        **{f"{key}_syncs": sum(value["syncs"].values()) for key, value in results.items()},
        "results": results,
    }


if __name__ == "__main__":
    run_benchmark(NAME, main)
