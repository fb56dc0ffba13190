"""The original ELMo on one GPU: training tokens/s, memory, FLOP/s and where the time goes.

    python -m benchmarks.gpu_original_elmo [--steps 200] [--out DIR] [--batch-sizes 128,384]
    python -m benchmarks.gpu_original_elmo --dry-run      # shrunk sizes, any machine, CPU too

(`--dry-run`: 3 steps after 1, the shrunk model, 300 tokens embedded; its profile
`--profile-steps` steps where given, else 2.)

The configs: `elmo_lstm_original.jsonnet` (2 x 4096/512, clips 3) and
`elmo_transformer_original.jsonnet` (6 x 512/2048) at full size (2048-filter character CNN,
8192 sampled negatives, windows of 20 tokens, the 793,471-word `tokens.txt`). For each config,
batch size and precision (fp32: TF32 off; tf32: TF32 matmuls and convolutions; bf16:
`mixed_precision: bf16` with TF32 for what autocast leaves in float32):
- training tokens/s over `--steps` optimizer steps after `--warmup` untimed ones, through the
  config's own reader, data loader (its batches copied as it copies them), model, optimizer
  and gradient clipping (the steps of allennlp's trainer). A torch before 2.14 cannot clip
  sparse gradients: those steps run unclipped, `gradient_clipping: false`. Tokens = forward
  targets (each window's words and `</S>`);
- peak GPU memory;
- FLOPs per step (torch's FlopCounterMode over one forward + backward), the achieved FLOP/s and
  its fraction of this GPU's own measured matmul rate at that precision (8192^3 products);
- a profile of `--profile-steps` steps of every run: the share of the step the GPU is busy
  (kernel time over wall time), GPU kernel time vs waiting for the data loader vs the rest
  (launch gaps, Python, host syncs), the kernels and the host's waits for the GPU per step,
  and the costliest kernels and host operators;
- torch.compile: each run (and each measurement below) starts from a reset dynamo, so the
  precisions, batch sizes and grad modes of the runs before it never pile up to dynamo's
  recompile limit (past it the LSTM runs its plain steps). `compiled_lstm_steps` says whether the
  LSTM ran its compiled steps, `dynamo_graphs` how many graphs dynamo compiled in the run;
  every recompile is logged with its reason (stderr).
Each run is made with each of `--steppers`: `eager`, the step above; `graph`, allennlp's
per-batch calls on the `elmo_graph_step` trainer (one eager warm-up batch, then the step
captured in a CUDA graph and replayed; eager on a CPU): `captured`, or `eager_reason`, printed
under the table. Per config and
precision, `graph_vs_eager` trains 6 batches (dropout off, the same batches and random draws) on
both steppers from the same weights: the largest relative difference between a loss the graph's
trainer hands on and the eager loss of the same batch (its values come one step late).
`--dense-softmax` adds the LSTM at the largest batch and the first precision with a dense
softmax and dense Adagrad (`sparse_embeddings: false`): against the config's row gradients,
the faster for one GPU.
`--baseline FILE` (another run's results.json, e.g. of the code before a change, made in the
same call) prints each run's tokens/s against the baseline's run of the same config,
precision and batch size.
Then embedding, with the same random original-size weights: our `elmo-embed` path
(`embed_file`, `--embed-batch-tokens`) vs allennlp's `Elmo` (batches of 32 in file order) on
the same GPU, tokens/s each (full float32 output, TF32 off). Ours also with `--dtype float16`,
with `--pool mean`, per precision (`--precision fp32` and each of `--precisions`), and the
computation alone (no copy back, nothing written: where the disk becomes the bound, against
this disk's fsynced write rate). Each precision's max abs difference to the CPU's float32
vectors of the first `--embed-check-tokens` tokens.

Text: `scripts/make_scale_corpus.py` (1B Word's shape) in a temporary folder. Prints one JSON
object per measurement and a table, then ends with one JSON line (benchmarks/support/common.py):
`CONFIG_PRECISION_bBATCH_tokens_per_s` for each run, `embed_speedup` and every measurement
(`results`);
`--out DIR` also writes results.json there. Without a CUDA device (and without `--dry-run`) it
is skipped.
"""

import copy
import functools
import json
import os
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from allennlp.common import Params
from allennlp.data import DataLoader, DatasetReader, Vocabulary
from allennlp.models import Model
from allennlp.training.gradient_descent_trainer import GradientDescentTrainer
from allennlp.training.optimizers import Optimizer

import elmo_plugin  # noqa: F401  (registers components)
from benchmarks.support.child import Child
from benchmarks.support.common import (
    CONFIG_DIR,
    Declaration,
    Skip,
    benchmark_parser,
    run_benchmark,
    scale_corpus_command,
)
from benchmarks.support.trainer_batch import handed_on, train_batch
from elmo_plugin.data.corpus_data_loader import to_device
from elmo_plugin.modules import sequence_clipped_lstm
from elmo_plugin.training.elmo_graph_step import ElmoGraphStepTrainer
from elmo_plugin.training.process_settings import ProcessSettings
from elmo_plugin.training.sparse_gradient_sync import unclippable_sparse_parameters

NAME = "gpu_original_elmo"
CONFIGS = {"lstm": "elmo_lstm_original.jsonnet", "transformer": "elmo_transformer_original.jsonnet"}
STEPPERS = ("eager", "graph")
# The softmax's gradient: the config's fixed-shape row gradients, or a dense softmax (dense
# Adagrad over every row).
SOFTMAXES: dict[str, dict[str, Any]] = {
    "rows": {},
    "dense": {"model.sparse_embeddings": False, "model.row_gradients": False},
}
PRECISIONS: dict[
    str, dict[str, Any]
] = {  # config overrides; TF32 on but for fp32 (ProcessSettings)
    "fp32": {},
    "tf32": {},
    "bf16": {"model.mixed_precision": "bf16"},
}
NO_DROPOUT = {  # graph_vs_eager
    "model.dropout": 0.0,
    "model.contextualizer.dropout": 0.0,
}
NO_TRANSFORMER_DROPOUT = {**NO_DROPOUT, "model.contextualizer.input_dropout": 0.0}
SHRUNK: dict[str, Any] = {  # --dry-run: every size down, same code paths
    "model.text_field_embedder.token_embedders.elmo.filters": [[1, 8], [2, 8], [3, 16]],
    "model.text_field_embedder.token_embedders.elmo.projection_dim": 16,
    "model.text_field_embedder.token_embedders.elmo.num_highway": 1,
    "model.contextualizer.input_dim": 16,
    "model.num_samples": 64,
    "data_loader.batch_size": 8,
}
SHRUNK_LSTM = {"model.contextualizer.cell_size": 32}
SHRUNK_TRANSFORMER = {
    "model.contextualizer.feedforward_hidden_dim": 32,
    "model.contextualizer.num_layers": 2,
    "model.contextualizer.num_attention_heads": 2,
}


def make_corpus(folder: Path, tokens: int) -> Path:
    """Shards of 1B Word's shape in folder/train; returns the 793,471-word tokens.txt."""
    command = scale_corpus_command(folder / "train", tokens, 4)
    Child(command, folder / "corpus.log").check()
    return folder / "tokens.txt"


def fresh_compilation() -> None:
    """Forgets every torch.compile'd function, its guards and dynamo's counters: each run
    compiles the LSTM's steps for itself instead of piling its precision, batch size and grad
    mode onto the runs before (dynamo's recompile limit would make them eager unseen)."""
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    sequence_clipped_lstm.compiled_steps.cache_clear()


def compilation() -> dict[str, Any]:
    """Since `fresh_compilation`: whether the LSTM ran its compiled steps (none failed in this
    process: after a failure it runs the plain ones, warned), and how many graphs dynamo
    compiled (more than the steps' first compilations: recompiles, logged)."""
    made = sequence_clipped_lstm.compiled_steps.cache_info().currsize > 0
    return {
        "compiled_lstm_steps": made and not sequence_clipped_lstm.COMPILE_FAILED.is_set(),
        "dynamo_graphs": torch._dynamo.utils.counters["stats"]["unique_graphs"],
    }


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def endless(loader: DataLoader) -> Iterator[dict]:
    while True:
        yield from loader


class TrainingRun:
    """A config's model, data loader and optimizer, built as `allennlp train` builds them."""

    def __init__(
        self,
        config: str,
        values: dict,
        corpus: Path,
        vocab: Vocabulary,
        device: torch.device,
        stepper: str = "eager",
    ) -> None:
        params = Params.from_file(str(CONFIG_DIR / config), json.dumps(values))
        reader = DatasetReader.from_params(params.pop("dataset_reader"))
        torch.manual_seed(0)
        self.model = Model.from_params(vocab=vocab, params=params.pop("model")).to(device)
        self.loader = DataLoader.from_params(
            params=params.pop("data_loader"),
            reader=reader,
            data_path=str(corpus / "train" / "*.txt"),
        )
        self.loader.index_with(vocab)
        trainer = params.pop("trainer")
        parameters = [[name, p] for name, p in self.model.named_parameters() if p.requires_grad]
        self.optimizer = Optimizer.from_params(
            model_parameters=parameters, params=trainer.pop("optimizer")
        )
        self.grad_norm = trainer.pop("grad_norm", None)
        # A torch before 2.14 cannot clip sparse gradients (allennlp's trainer fails there):
        # those steps run unclipped, and the result says so.
        self.clips = bool(self.grad_norm) and not unclippable_sparse_parameters(
            self.model, self.grad_norm
        )
        self.device = device
        self.batches = endless(self.loader)
        self.data_seconds = 0.0
        self.trainer = self.trainer_of(ElmoGraphStepTrainer, corpus) if stepper == "graph" else None
        # batches on the host, copied by `next_batch` as for the eager stepper (a trainer
        # points the loader at its device)
        self.loader.set_target_device(torch.device("cpu"))

    def trainer_of(
        self, trainer: type[GradientDescentTrainer], folder: Path
    ) -> GradientDescentTrainer:
        """An allennlp trainer of this run's model, optimizer, loader and clipping, on its
        device (`elmo_graph_step` after two eager warm-up batches: `flops_per_step`'s runs
        uncompiled)."""
        options: dict[str, Any] = {"warmup_batches": 2} if trainer is ElmoGraphStepTrainer else {}
        return trainer(
            self.model,
            self.optimizer,
            self.loader,
            serialization_dir=str(folder / trainer.__name__),
            grad_norm=self.grad_norm if self.clips else False,
            cuda_device=self.device,
            **options,
        )

    def next_batch(self) -> dict:
        """The loader's next batch on the device, copied as the loader copies it (pinned,
        non-blocking); `data_seconds` counts the wait for the loader only."""
        start = time.perf_counter()
        batch = next(self.batches)
        self.data_seconds += time.perf_counter() - start
        return to_device(batch, self.device)

    def step(self) -> torch.Tensor:
        """One optimizer step as allennlp's trainer takes it (without its host reads, or through
        `elmo_graph_step`'s per-batch calls); returns the number of targets."""
        batch = self.next_batch()
        if self.trainer is not None:
            outputs, _ = train_batch(self.trainer, batch)
            return outputs["batch_weight"].detach().clone()  # a replay overwrites its outputs
        self.optimizer.zero_grad(set_to_none=True)
        output = self.model(**batch)
        output["loss"].backward()
        if self.clips:
            torch.nn.utils.clip_grad_norm_(
                [p for p in self.model.parameters() if p.grad is not None], self.grad_norm
            )
        self.optimizer.step()
        return output["batch_weight"].detach()

    def flops_per_step(self) -> float:
        from torch.utils.flop_counter import FlopCounterMode

        counter = FlopCounterMode(display=False)
        # Compiled kernels bypass the counter's operator hooks: count the plain computation.
        with counter, torch._dynamo.config.patch(disable=True):
            self.step()
        return float(counter.get_total_flops())


def matmul_rate(device: torch.device, precision: str, size: int) -> float:
    """This device's FLOP/s for a size^3 product at the precision (random operands)."""
    dtype = torch.bfloat16 if precision == "bf16" else torch.float32
    saved = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = precision != "fp32"
    a, b = (torch.randn(size, size, device=device, dtype=dtype) for _ in range(2))
    for _ in range(3):
        a @ b
    synchronize(device)
    repeats, start = 10, time.perf_counter()
    for _ in range(repeats):
        a @ b
    synchronize(device)
    torch.backends.cuda.matmul.allow_tf32 = saved
    return 2 * size**3 * repeats / (time.perf_counter() - start)


# CUDA runtime calls in which the host waits for the GPU (cudaMemcpy: the synchronous copy)
HOST_SYNCS = {
    "cudaStreamSynchronize",
    "cudaDeviceSynchronize",
    "cudaEventSynchronize",
    "cudaMemcpy",
}


def profile_steps(run: TrainingRun, steps: int) -> dict[str, Any]:
    """Wall time of `steps` steps split into GPU kernel time, data loading and the rest, with
    what the rest is made of: kernel launches, host waits for the GPU (HOST_SYNCS) and the
    operators that cost the host most. Times in s per step, `top_*` in ms per step."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + (
        [ProfilerActivity.CUDA] if run.device.type == "cuda" else []
    )
    run.data_seconds = 0.0
    synchronize(run.device)
    start = time.perf_counter()
    with profile(activities=activities) as prof:
        for _ in range(steps):
            run.step()
        synchronize(run.device)
    wall = time.perf_counter() - start
    events = [e for e in prof.events() if not e.is_user_annotation]
    kernels = [e for e in events if e.device_type.name == "CUDA"]
    host = [e for e in events if e.device_type.name == "CPU"]
    syncs = [e for e in host if e.name in HOST_SYNCS]
    kernel_s = sum(e.self_device_time_total for e in kernels) / 1e6
    averages = prof.key_averages()
    return {
        "profiled_steps": steps,
        "gpu_busy_share": round(kernel_s / wall, 3),
        "wall_s_per_step": wall / steps,
        "kernel_s_per_step": kernel_s / steps,
        "data_loading_s_per_step": run.data_seconds / steps,
        "other_s_per_step": (wall - kernel_s - run.data_seconds) / steps,
        "kernels_per_step": len(kernels) / steps,
        "host_syncs_per_step": len(syncs) / steps,
        "host_sync_wait_s_per_step": sum(e.cpu_time_total for e in syncs) / 1e6 / steps,
        "top_kernels": top_per_step(averages, "CUDA", "self_device_time_total", steps),
        "top_host_operators": top_per_step(averages, "CPU", "self_cpu_time_total", steps),
    }


def top_per_step(averages, device: str, time_key: str, steps: int) -> list:
    """The 8 costliest of a profile's averaged events on `device` (CPU / CUDA), user annotations
    left out -> [(name, ms per step, calls per step)]."""
    chosen = [
        e
        for e in averages
        if e.device_type.name == device and not getattr(e, "is_user_annotation", False)
    ]
    chosen.sort(key=lambda e: -getattr(e, time_key))
    return [
        (e.key[:60], round(getattr(e, time_key) / 1e3 / steps, 3), e.count / steps)
        for e in chosen[:8]
    ]


def measure_training(
    name: str,
    precision: str,
    batch_size: int,
    softmax: str,
    stepper: str,
    args,
    corpus: Path,
    vocab,
    device,
    peaks,
) -> dict:
    values = {
        "data_loader.num_workers": args.num_workers,
        "data_loader.batch_size": batch_size,
        **PRECISIONS[precision],
        **SOFTMAXES[softmax],
    }
    ProcessSettings(tf32=precision != "fp32").apply()
    fresh_compilation()
    if args.dry_run:
        values.update(SHRUNK, **(SHRUNK_TRANSFORMER if name == "transformer" else SHRUNK_LSTM))
        values["data_loader.batch_size"] = batch_size // 16
    run = TrainingRun(CONFIGS[name], values, corpus, vocab, device, stepper)
    run.model.train()
    if device.type == "cuda":  # from here: a graph's capture happens in the warm-up
        torch.cuda.reset_peak_memory_stats(device)
    flops = run.flops_per_step()
    for _ in range(args.warmup):
        run.step()
    synchronize(device)
    run.data_seconds, targets = 0.0, []
    start = time.perf_counter()
    for _ in range(args.steps):
        targets.append(run.step())
    synchronize(device)
    seconds = time.perf_counter() - start
    tokens = float(torch.stack(targets).sum())
    result = {
        "config": CONFIGS[name],
        "precision": precision,
        "batch_size": batch_size,
        "softmax": softmax,
        "stepper": stepper,
        "steps": args.steps,
        "gradient_clipping": run.clips,
        "tokens_per_s": round(tokens / seconds, 1),
        "s_per_step": round(seconds / args.steps, 4),
        "tokens_per_step": round(tokens / args.steps, 1),
        "data_wait_fraction": round(run.data_seconds / seconds, 3),
        "flops_per_step": flops,
        "achieved_tflop_s": round(flops * args.steps / seconds / 1e12, 2),
        "matmul_tflop_s": round(peaks[precision] / 1e12, 1),
        "fraction_of_matmul_rate": round(flops * args.steps / seconds / peaks[precision], 3),
        "peak_memory_gib": round(torch.cuda.max_memory_allocated(device) / 2**30, 2)
        if device.type == "cuda"
        else None,
    }
    if isinstance(run.trainer, ElmoGraphStepTrainer):  # whether the graph ran, or why not
        result["captured"] = run.trainer.captured
        result["eager_reason"] = run.trainer.eager_reason
    if args.profile_steps:
        result["profile"] = profile_steps(run, args.profile_steps)
    result.update(compilation())
    del run
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return result


def corpus_sentences(corpus: Path, max_tokens: int) -> list[list[str]]:
    sentences, total = [], 0
    for shard in sorted((corpus / "train").glob("*.txt")):
        for line in shard.read_text(encoding="utf-8").splitlines():
            tokens = line.split()
            if tokens and total < max_tokens:
                sentences.append(tokens)
                total += len(tokens)
    return sentences


def original_options(dry_run: bool) -> dict:
    """The published original ELMo's options.json (2 x 4096/512, clips 3, 2048 character
    filters, 2 highway); shrunk with `dry_run`."""
    from benchmarks.embedder_vs_allennlp_elmo import PUBLISHED_ORIGINAL as ORIGINAL

    if not dry_run:
        return ORIGINAL
    filters = SHRUNK["model.text_field_embedder.token_embedders.elmo.filters"]
    return {
        "lstm": {**ORIGINAL["lstm"], "projection_dim": 16, "dim": 32},
        "char_cnn": {**ORIGINAL["char_cnn"], "filters": filters},
    }


def max_abs_difference(ours: dict[str, Any], reference: dict[str, Any]) -> float:
    return max(
        float(abs(ours[name].astype("float32") - value).max(initial=0))
        for name, value in reference.items()
    )


def disk_write_rate(folder: Path, megabytes: int) -> float:
    """MB/s of writing `megabytes` of random bytes to a file in `folder` and fsyncing it."""
    block = os.urandom(1 << 20)
    path = folder / "disk_rate.bin"
    start = time.perf_counter()
    with open(path, "wb") as output:
        for _ in range(megabytes):
            output.write(block)
        output.flush()
        os.fsync(output.fileno())
    seconds = time.perf_counter() - start
    path.unlink()
    return megabytes / seconds


def measure_embedding(args, corpus: Path, device: torch.device, precisions: list[str]) -> dict:
    """`elmo-embed`'s embed_file vs allennlp's Elmo, same random original-size weights: tokens/s
    of the full output (float32; float16), of `--pool mean` and of the computation alone (no
    copy back, nothing written). Per precision: the full float32 output's tokens/s and its max
    abs difference to the CPU's float32 vectors (the first `--embed-check-tokens`). And this
    disk's write rate. Files go in corpus/embedding (inside main's temporary folder)."""
    from allennlp.modules.elmo import Elmo, batch_to_ids

    from benchmarks.elmo_embed_options import datasets
    from benchmarks.embedder_vs_allennlp_elmo import reset_allennlp_states
    from elmo_plugin.commands import elmo_embed
    from elmo_plugin.commands.line_vectors import VectorForm
    from elmo_plugin.elmo_files.options import architecture_from_options
    from elmo_plugin.elmo_files.weights import write_bilm_encoder
    from elmo_plugin.modules.bilm_encoder import BiLmEncoder

    fresh_compilation()
    options = original_options(args.dry_run)
    sentences = corpus_sentences(corpus, args.embed_tokens)
    tokens = sum(len(s) for s in sentences)
    folder = corpus / "embedding"
    folder.mkdir()
    torch.manual_seed(0)
    cpu_encoder = BiLmEncoder.from_architecture(architecture_from_options(options)).eval()
    write_bilm_encoder(cpu_encoder, str(folder / "options.json"), str(folder / "weights.hdf5"))
    text, check = folder / "input.txt", folder / "check.txt"
    text.write_text("\n".join(" ".join(s) for s in sentences) + "\n", encoding="utf-8")
    checked = corpus_sentences(corpus, args.embed_check_tokens)
    check.write_text("\n".join(" ".join(s) for s in checked) + "\n", encoding="utf-8")
    elmo_embed.embed_file(cpu_encoder, str(check), str(folder / "cpu.hdf5"))
    reference = datasets(str(folder / "cpu.hdf5"))
    encoder = copy.deepcopy(cpu_encoder).to(device)
    batching = elmo_embed.Batching(args.embed_batch_size, args.embed_batch_tokens)

    def tokens_per_s(name: str, precision: str = "fp32", **output: str) -> float:
        form = elmo_embed.OutputFormat(**output)
        run = functools.partial(elmo_embed.embed_file, encoder, str(text), batching=batching)
        run(
            output_file=str(folder / f"warmup_{name}.hdf5"), output_format=form, precision=precision
        )
        synchronize(device)
        start = time.perf_counter()
        run(output_file=str(folder / f"{name}.hdf5"), output_format=form, precision=precision)
        synchronize(device)
        return round(tokens / (time.perf_counter() - start), 1)

    def computation_tokens_per_s() -> float:
        """The batches of `embed_file`'s path on this device, computed and nothing else (after
        a warm-up window)."""
        chunk = list(enumerate(sentences))
        path = elmo_embed.cpu_batches if device.type == "cpu" else elmo_embed.fixed_shape_batches
        token_ids = elmo_embed.encoder_token_ids(encoder)
        size = batching.sort_window

        def compute(window: list) -> None:
            for _ in path(encoder, token_ids, window, batching, VectorForm(), "fp32"):
                pass

        with torch.no_grad():
            compute(chunk[:size])
            synchronize(device)
            start = time.perf_counter()
            for first in range(0, len(chunk), size):
                compute(chunk[first : first + size])
            synchronize(device)
        return round(tokens / (time.perf_counter() - start), 1)

    result: dict[str, Any] = {
        "embedding": f"{len(sentences)} sentences, {tokens} tokens, original size, random weights",
        "batching": f"--batch-size {batching.batch_size} --batch-tokens {batching.batch_tokens}",
        "max_abs_diff_vs_cpu": {},
    }
    for precision in dict.fromkeys(["fp32", *precisions]):
        ProcessSettings(tf32=precision == "tf32").apply()
        result[f"{precision}_tokens_per_s"] = tokens_per_s(precision, precision)
        elmo_embed.embed_file(
            encoder, str(check), str(folder / f"check_{precision}.hdf5"), precision=precision
        )
        ours = datasets(str(folder / f"check_{precision}.hdf5"))
        result["max_abs_diff_vs_cpu"][precision] = max_abs_difference(ours, reference)
    ProcessSettings(tf32=False).apply()
    result["ours_elmo_embed_tokens_per_s"] = result["fp32_tokens_per_s"]
    result["float16_tokens_per_s"] = tokens_per_s("float16", dtype="float16")
    result["pool_mean_tokens_per_s"] = tokens_per_s("pool_mean", pool="mean")
    result["computation_only_tokens_per_s"] = computation_tokens_per_s()
    disk = disk_write_rate(folder, 64 if args.dry_run else 2048)
    bytes_per_token = encoder.num_layers * encoder.get_output_dim() * 4
    result["disk_write_mb_per_s"] = round(disk, 1)
    result["disk_bound_float32_tokens_per_s"] = round(disk * 1e6 / bytes_per_token, 1)
    theirs_elmo = (
        Elmo(str(folder / "options.json"), str(folder / "weights.hdf5"), 1, dropout=0.0)
        .to(device)
        .eval()
    )
    batches = [batch_to_ids(sentences[i : i + 32]) for i in range(0, len(sentences), 32)]
    with torch.no_grad():
        theirs_elmo(batches[0].to(device))
        synchronize(device)
        start = time.perf_counter()
        for char_ids in batches:
            reset_allennlp_states(theirs_elmo)
            vectors = theirs_elmo(char_ids.to(device))["elmo_representations"][0].cpu()
        synchronize(device)
    theirs = time.perf_counter() - start
    del vectors
    result["allennlp_elmo_tokens_per_s"] = round(tokens / theirs, 1)
    result["speedup"] = round(result["ours_elmo_embed_tokens_per_s"] * theirs / tokens, 2)
    return result


def training_runs(args, precisions: list[str]) -> list[tuple[str, str, int, str, str]]:
    """(config, precision, batch size, softmax, stepper) of every training measurement asked
    for."""
    batch_sizes = [int(size) for size in args.batch_sizes.split(",") if size]
    steppers = [stepper for stepper in args.steppers.split(",") if stepper]
    runs = [
        (name, precision, batch_size, "rows", stepper)
        for name in args.configs.split(",")
        if name
        for batch_size in batch_sizes
        for precision in precisions
        for stepper in steppers
    ]
    if args.dense_softmax:
        runs.append(("lstm", precisions[0], max(batch_sizes), "dense", steppers[0]))
    return runs


def graph_vs_eager(name: str, precision: str, args, corpus: Path, vocab, device) -> dict:
    """6 batches without dropout on both steppers from the same weights, the same batches and
    random draws: the losses each hands on, whether the graph stepper captured its step, and
    the largest relative difference of a graph loss (one batch late where captured) to the
    eager loss of its batch, over the 3 batches after the capture's."""
    values = {
        "data_loader.num_workers": 0,
        **PRECISIONS[precision],
        **(NO_TRANSFORMER_DROPOUT if name == "transformer" else NO_DROPOUT),
    }
    ProcessSettings(tf32=precision != "fp32").apply()
    fresh_compilation()
    if args.dry_run:
        values.update(SHRUNK, **(SHRUNK_TRANSFORMER if name == "transformer" else SHRUNK_LSTM))
    runs = [TrainingRun(CONFIGS[name], values, corpus, vocab, device) for _ in STEPPERS]
    trainers = [
        run.trainer_of(trainer, corpus)
        for run, trainer in zip(runs, (GradientDescentTrainer, ElmoGraphStepTrainer), strict=True)
    ]
    losses: dict[str, list[float]] = {stepper: [] for stepper in STEPPERS}
    for index in range(6):
        batch = runs[0].next_batch()
        for stepper, trainer in zip(STEPPERS, trainers, strict=True):
            torch.manual_seed(index)
            losses[stepper].append(handed_on(trainer, batch)[0])
    graph_trainer = trainers[1]
    assert isinstance(graph_trainer, ElmoGraphStepTrainer)
    captured = graph_trainer.captured
    # batch 0 eager, 1 the warm-up on the capture stream (handing on its own values), 2
    # captured, each from 2 on handing on the batch before's; eager throughout where it
    # could not capture (a CPU)
    graph = losses["graph"][3:] if captured else losses["graph"][2:5]
    differences = [abs(g - e) / abs(e) for g, e in zip(graph, losses["eager"][2:5], strict=True)]
    result = {
        "graph_vs_eager": CONFIGS[name],
        "precision": precision,
        "captured": captured,
        "eager_reason": graph_trainer.eager_reason,
        "losses": losses,
        "max_relative_difference": max(differences),
        **compilation(),
    }
    del runs, trainers, graph_trainer
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return result


def stepper_label(result: dict[str, Any]) -> str:
    """ "graph (eager)" for a graph run that could not capture its step."""
    return result["stepper"] + ("" if result.get("captured", True) else " (eager)")


def compiled_label(result: dict[str, Any]) -> str:
    """The graphs dynamo compiled in a run where its LSTM ran compiled steps, else "-" (plain
    steps: on a CPU, without Triton, after a compiled step failed; or no LSTM)."""
    return str(result["dynamo_graphs"]) if result["compiled_lstm_steps"] else "-"


def against_baseline(result: dict[str, Any], baseline: list[dict[str, Any]]) -> str:
    """`result`'s tokens/s over the baseline run's of the same config, precision, batch size
    (128 where a run does not name one), softmax ("rows": the config's own) and stepper
    ("eager" where a run does not name one), e.g. "11.2x"."""
    for other in baseline:
        if (
            other.get("config") == result["config"]
            and other.get("precision") == result["precision"]
            and other.get("batch_size", 128) == result["batch_size"]
            and other.get("softmax", "rows") == result["softmax"]
            and other.get("stepper", "eager") == result["stepper"]
        ):
            return f"{result['tokens_per_s'] / other['tokens_per_s']:.2f}x"
    return "-"


DECLARATION = Declaration(
    quick=["--steps", "20", "--warmup", "5", "--precisions", "bf16"],
)


def main(argv: list[str]) -> dict[str, Any]:
    parser = benchmark_parser(__doc__)
    parser.add_argument(
        "--dry-run", action="store_true", help="shrunk sizes, few steps; runs on a CPU"
    )
    parser.add_argument(
        "--steps", type=int, default=200, help="timed optimizer steps per configuration"
    )
    parser.add_argument(
        "--warmup", type=int, default=20, help="untimed steps first (compilation, allocator)"
    )
    parser.add_argument(
        "--configs",
        default="lstm,transformer",
        help="comma-separated: lstm, transformer (empty: the embedding only)",
    )
    parser.add_argument(
        "--precisions", default="fp32,tf32,bf16", help="comma-separated: fp32, tf32, bf16"
    )
    parser.add_argument(
        "--batch-sizes", default="128", help="comma-separated windows per step, e.g. 128,384"
    )
    parser.add_argument(
        "--steppers", default="eager,graph", help="comma-separated: eager, graph (elmo_graph_step)"
    )
    parser.add_argument(
        "--dense-softmax",
        action="store_true",
        help="also the LSTM at the largest batch and the first precision with a dense softmax",
    )
    parser.add_argument(
        "--baseline", help="results.json of another run: print tokens/s against its runs"
    )
    parser.add_argument(
        "--profile-steps", type=int, help="profiled steps per run (default 3; a dry run's 2)"
    )
    parser.add_argument("--num-workers", type=int, default=2, help="data loader worker processes")
    parser.add_argument(
        "--embed-tokens", type=int, default=100_000, help="tokens embedded by each side"
    )
    parser.add_argument(
        "--embed-check-tokens",
        type=int,
        default=2_000,
        help="tokens embedded on the CPU too, for the max abs difference of each precision",
    )
    parser.add_argument(
        "--embed-batch-tokens", type=int, default=4096, help="elmo-embed's --batch-tokens"
    )
    parser.add_argument(
        "--embed-batch-size", type=int, default=256, help="elmo-embed's --batch-size"
    )
    parser.add_argument("--no-embed", action="store_true", help="skip the embedding comparison")
    parser.add_argument("--out", help="folder for results.json")
    args = parser.parse_args(argv)
    if args.profile_steps is None:
        args.profile_steps = 2 if args.dry_run else 3
    if args.dry_run:
        args.steps, args.warmup, args.embed_tokens = 3, 1, 300
        args.embed_check_tokens = 100
        args.num_workers = 0
    torch._logging.set_logs(recompiles=True)
    device = torch.device("cuda", 0) if torch.cuda.is_available() else torch.device("cpu")
    if device.type == "cpu" and not args.dry_run:
        raise Skip("no CUDA device here (--dry-run runs the shrunk version on the CPU)")
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU"
    print(json.dumps({"device": name, "torch": torch.__version__}), flush=True)

    precisions = [p for p in args.precisions.split(",") if p]
    if device.type == "cpu":
        precisions = [p for p in precisions if p != "tf32"]
    peaks = {p: matmul_rate(device, p, 512 if args.dry_run else 8192) for p in precisions}
    results: list[dict] = []

    def save() -> None:
        """results.json in --out after each measurement: a run cut short keeps what it made."""
        if args.out:
            os.makedirs(args.out, exist_ok=True)
            Path(args.out, "results.json").write_text(
                json.dumps({"device": name, "results": results}, indent=2)
            )

    figures: dict[str, Any] = {"headline": [], "device": name}
    with tempfile.TemporaryDirectory(prefix="elmo_gpu_bench_") as folder:
        # The loader cycles over the corpus: it need not hold every step's tokens.
        tokens_file = make_corpus(
            Path(folder), 20_000 if args.dry_run else max(args.embed_tokens, 2_000_000)
        )
        vocab = Vocabulary.from_params(
            Params({"type": "elmo_tokens_file", "tokens_file": str(tokens_file)})
        )
        for name_, precision, batch_size, softmax, stepper in training_runs(args, precisions):
            result = measure_training(
                name_,
                precision,
                batch_size,
                softmax,
                stepper,
                args,
                Path(folder),
                vocab,
                device,
                peaks,
            )
            print(json.dumps(result), flush=True)
            results.append(result)
            save()
            key = f"{name_}_{precision}_b{batch_size}{'_dense' if softmax == 'dense' else ''}"
            key += "_graph" if stepper == "graph" else ""
            figures[f"{key}_tokens_per_s"] = result["tokens_per_s"]
            figures["headline"].append(f"{key}_tokens_per_s")
        if "graph" in args.steppers.split(","):
            for name_ in [name for name in args.configs.split(",") if name]:
                for precision in precisions:
                    result = graph_vs_eager(name_, precision, args, Path(folder), vocab, device)
                    print(json.dumps(result), flush=True)
                    results.append(result)
                    save()
                    key = f"{name_}_{precision}_graph_vs_eager_max_relative_difference"
                    figures[key] = result["max_relative_difference"]
        if not args.no_embed:
            result = measure_embedding(args, Path(folder), device, precisions)
            print(json.dumps(result), flush=True)
            results.append(result)
            save()
            figures["embed_speedup"] = result["speedup"]
            figures["headline"].append("embed_speedup")
    baseline = json.loads(Path(args.baseline).read_text())["results"] if args.baseline else []
    print(
        f"\n{'config':34} {'prec':5} {'batch':>5} {'softmax':7} {'stepper':13} {'tokens/s':>10} "
        f"{'s/step':>7} "
        f"{'TFLOP/s':>8} {'of matmul':>9} {'GPU busy':>8} {'kernels':>8} {'syncs':>6} "
        f"{'compiled':>8} {'peak GiB':>8} {'vs baseline':>11}"
    )
    for r in results:
        if "config" in r:
            profile = r.get("profile", {})
            print(
                f"{r['config']:34} {r['precision']:5} {r['batch_size']:>5} {r['softmax']:7} "
                f"{stepper_label(r):13} {r['tokens_per_s']:>10} {r['s_per_step']:>7} "
                f"{r['achieved_tflop_s']:>8} "
                f"{r['fraction_of_matmul_rate']:>9} {profile.get('gpu_busy_share', '-'):>8} "
                f"{profile.get('kernels_per_step', '-'):>8} "
                f"{profile.get('host_syncs_per_step', '-'):>6} {compiled_label(r):>8} "
                f"{str(r['peak_memory_gib']):>8} {against_baseline(r, baseline):>11}"
            )
            if not r.get("captured", True):
                print(f"  {r['stepper']} ran eagerly: {r['eager_reason']}")
        elif "graph_vs_eager" in r:
            print(
                f"{r['graph_vs_eager']} {r['precision']}: graph vs eager losses on the same "
                f"batches, max relative difference {r['max_relative_difference']:.2e}"
                f"{'' if r['captured'] else ' (both eager: ' + r['eager_reason'] + ')'}"
            )
        else:
            print(
                f"elmo-embed {r['ours_elmo_embed_tokens_per_s']} tokens/s vs allennlp Elmo "
                f"{r['allennlp_elmo_tokens_per_s']} tokens/s: {r['speedup']}x; float16 "
                f"{r['float16_tokens_per_s']}, --pool mean {r['pool_mean_tokens_per_s']}, "
                f"computation only {r['computation_only_tokens_per_s']}, disk-bound (float32) "
                f"{r['disk_bound_float32_tokens_per_s']} tokens/s; max abs difference to the "
                f"CPU {r['max_abs_diff_vs_cpu']}"
            )
    return {**figures, "results": results}


if __name__ == "__main__":
    run_benchmark(NAME, main)
