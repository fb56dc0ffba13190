"""The sampled softmax at 1B Word's 793,471 words: dense vs sparse training step, and the memory
of evaluating one batch with the full softmax, chunked vs unchunked.

    python -m benchmarks.sparse_softmax [--vocab-size 793471] [--steps 3]

Model: elmo_lstm_original.jsonnet on the CPU with the LSTM cells shrunk to 1024 and the character
CNN to 256 filters (so that one core shows the softmax's share of a step); 2 layers, projections
and softmax 512 wide, 8192 negatives and batch 128 x 20 as published. A training step is
allennlp's: zero_grad, forward, backward, clip_grad_norm_(10), Adagrad 0.2. Each measurement
runs in its own child process (so one's memory does not count in another's), on the same
synthetic batch: random characters, log-uniformly distributed target ids (as the sampler's).
Evaluation memory is the peak RSS above the RSS before the batch, sampled every 2 ms; the
unchunked figure at the full vocabulary is extrapolated linearly from two smaller vocabularies
(it needs ~2 x 16 GB) unless --measure-unchunked.

Ends with one JSON line (benchmarks/support/common.py): seconds per step dense / sparse and their
ratio, the sparse step at a 50k-word vocabulary and the ratio to it, evaluation MB chunked /
unchunked and their ratio.
"""

import json
import math
import multiprocessing
import os
import statistics
import threading
import time
from typing import Any

import numpy
import torch
from allennlp.common import Params
from allennlp.data import Vocabulary
from allennlp.models import Model
from allennlp.training.optimizers import Optimizer

import elmo_plugin  # noqa: F401  (registers components)
from benchmarks.support.common import CONFIG_DIR, Declaration, benchmark_parser, run_benchmark

NAME = "sparse_softmax"
BATCH, WINDOW, CHARS = 128, 20, 50
SHRUNK = {
    "model.contextualizer.cell_size": 1024,
    "model.text_field_embedder.token_embedders.elmo.filters": [[1, 32], [2, 32], [3, 64], [4, 128]],
    "trainer.cuda_device": -1,
}


def build(vocab_size: int, sparse: bool) -> tuple[Model, Params]:
    """The original config's biLM, shrunk, over a vocabulary of `vocab_size` words, and its
    optimizer's params."""
    params = Params.from_file(
        str(CONFIG_DIR / "elmo_lstm_original.jsonnet"),
        json.dumps({**SHRUNK, "model.sparse_embeddings": sparse}),
    )
    vocab = Vocabulary(non_padded_namespaces=[])
    # vocab_size rows: vocab_size - 1 words + padding
    vocab.add_tokens_to_namespace([f"w{index}" for index in range(vocab_size - 1)], "tokens")
    torch.manual_seed(0)
    model = Model.from_params(vocab=vocab, params=params.pop("model"))
    return model, params.pop("trainer").pop("optimizer")


def synthetic_batch(vocab_size: int) -> dict:
    """128 windows of 20 words (+ boundaries): random characters, log-uniform word ids."""
    generator = torch.Generator().manual_seed(0)
    chars = torch.randint(1, 262, (BATCH, WINDOW + 2, CHARS), generator=generator)
    log_ids = torch.rand(BATCH, WINDOW + 2, generator=generator) * math.log(vocab_size - 2)
    tokens = {"tokens": (torch.exp(log_ids).long() + 1).clamp(max=vocab_size - 1)}
    return {"source": {"elmo": {"elmo_tokens": chars}, "tokens": tokens}}


def step_seconds(vocab_size: int, sparse: bool, steps: int) -> float:
    """Median seconds of one training step, after one warm-up step."""
    model, optimizer_params = build(vocab_size, sparse)
    optimizer = Optimizer.from_params(
        model_parameters=list(model.named_parameters()), params=optimizer_params
    )
    batch = synthetic_batch(vocab_size)
    model.train()
    numpy.random.seed(0)
    times = []
    for _ in range(steps + 1):
        start = time.perf_counter()
        optimizer.zero_grad()
        model(**batch)["loss"].backward()
        torch.nn.utils.clip_grad_norm_([p for p in model.parameters() if p.grad is not None], 10.0)
        optimizer.step()
        times.append(time.perf_counter() - start)
    return statistics.median(times[1:])


def rss_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def evaluation_bytes(vocab_size: int, chunked: bool) -> int:
    """Peak RSS above the starting one while evaluating one batch (full softmax, no grad)."""
    model, _ = build(vocab_size, sparse=True)
    if not chunked:
        softmax_loss: Any = model._softmax_loss
        softmax_loss.max_eval_logits = 2**62  # one chunk: allennlp's computation
    batch = synthetic_batch(vocab_size)
    model.eval()
    before, peak, done = rss_bytes(), [0], threading.Event()

    def sample() -> None:
        while not done.is_set():
            peak[0] = max(peak[0], rss_bytes())
            time.sleep(0.002)

    sampler = threading.Thread(target=sample)
    sampler.start()
    with torch.no_grad():
        model(**batch)
    done.set()
    sampler.join()
    return max(peak[0], rss_bytes()) - before


def in_child(function, *args):
    """`function(*args)` in a fresh process (fork): its memory is returned when it exits."""
    with multiprocessing.get_context("fork").Pool(1) as pool:
        return pool.apply(function, args)


DECLARATION = Declaration(
    quick=["--vocab-size", "60000", "--reference-vocab-size", "20000", "--steps", "1"],
    cheapest=["--steps", "three"],
    cheapest_status="failed",
)


def main(argv: list[str]) -> dict[str, Any]:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--vocab-size", type=int, default=793471)
    parser.add_argument(
        "--reference-vocab-size", type=int, default=50000, help="the sparse step again at this size"
    )
    parser.add_argument(
        "--steps", type=int, default=3, help="timed training steps per side (after 1 warm-up)"
    )
    parser.add_argument(
        "--measure-unchunked", action="store_true", help="measure, not extrapolate (~2 x 16 GB)"
    )
    args = parser.parse_args(argv)
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    result: dict[str, Any] = {
        "headline": ["dense_over_sparse_step", "eval_unchunked_over_chunked_MB"],
        "vocab_size": args.vocab_size,
        "softmax_rows_x_dim": f"{args.vocab_size} x 512",
        "threads": torch.get_num_threads(),
    }
    result["dense_step_s"] = in_child(step_seconds, args.vocab_size, False, args.steps)
    result["sparse_step_s"] = in_child(step_seconds, args.vocab_size, True, args.steps)
    result["dense_over_sparse_step"] = result["dense_step_s"] / result["sparse_step_s"]
    reference = args.reference_vocab_size
    result[f"sparse_step_s_at_{reference}"] = in_child(step_seconds, reference, True, args.steps)
    result[f"sparse_step_over_sparse_at_{reference}"] = (
        result["sparse_step_s"] / result[f"sparse_step_s_at_{reference}"]
    )
    megabytes = 2**20
    result["eval_chunked_MB"] = in_child(evaluation_bytes, args.vocab_size, True) / megabytes
    if args.measure_unchunked:
        result["eval_unchunked_MB"] = in_child(evaluation_bytes, args.vocab_size, False) / megabytes
    else:  # the logits and their log-softmax grow linearly with the rows
        small, large = 50_000, 100_000
        at_small, at_large = (
            in_child(evaluation_bytes, size, False) / megabytes for size in (small, large)
        )
        result["eval_unchunked_MB_at_50k_100k"] = [at_small, at_large]
        result["eval_unchunked_MB_extrapolated"] = at_small + (at_large - at_small) * (
            args.vocab_size - small
        ) / (large - small)
    unchunked = result.get("eval_unchunked_MB", result.get("eval_unchunked_MB_extrapolated"))
    result["eval_unchunked_over_chunked_MB"] = unchunked / result["eval_chunked_MB"]
    return result


if __name__ == "__main__":
    run_benchmark(NAME, main)
