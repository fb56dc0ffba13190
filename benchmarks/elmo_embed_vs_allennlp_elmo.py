"""End to end: `elmo-embed` (batches by tokens, length-sorted windows, token cache, HDF5 out) vs
allennlp's `Elmo` run the usual way (batches of 32 sentences in file order), same weights, one
run. Usage:

    python -m benchmarks.elmo_embed_vs_allennlp_elmo [--sentences 100000]
        [--allennlp-sentences 2000]

Input: a text file of --sentences sentences, WikiText-2 valid.txt's sentences (as in
embedder_vs_allennlp_elmo) repeated in file order as often as needed. Weights: the published small
size, random (as embedder_vs_allennlp_elmo). Ours: `embed_file` with its defaults, `--layers all`,
the whole file in and out (HDF5 written). allennlp: `Elmo` on the first --allennlp-sentences
sentences in batches of 32, outputs computed and dropped (its side is slow: capping it keeps the
run short; tokens/s is what is compared). Times are this process's CPU time (`--clock cpu`, the
default on a shared machine) or wall time. Ends with one JSON line (benchmarks/support/common.py):
tokens/s of both, their ratio (`end_to_end_speedup`), the peak resident memory after our run
and after a run on a quarter of the file (flat memory: about equal), and the max abs difference
of our vectors from allennlp's on the sentences both embedded.
"""

import os
import resource
import shutil
import tempfile
from typing import Any

import h5py
import numpy
import torch
from allennlp.modules.elmo import Elmo, batch_to_ids

import elmo_plugin  # noqa: F401  (registers components)
from benchmarks.embedder_vs_allennlp_elmo import (
    PUBLISHED_SMALL,
    reset_allennlp_states,
    wikitext_sentences,
    write_random_elmo,
)
from benchmarks.support.common import CLOCKS, Declaration, benchmark_parser, run_benchmark
from benchmarks.support.wikitext_data import WIKITEXT
from elmo_plugin.commands.elmo_embed import embed_file
from elmo_plugin.elmo_files.weights import read_bilm_encoder

NAME = "elmo_embed_vs_allennlp_elmo"


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def write_input(path: str, sentences: list[list[str]], count: int) -> int:
    """`count` sentences, cycling through `sentences`, one per line; returns the tokens."""
    tokens = 0
    with open(path, "w", encoding="utf-8") as text:
        for index in range(count):
            sentence = sentences[index % len(sentences)]
            text.write(" ".join(sentence) + "\n")
            tokens += len(sentence)
    return tokens


DECLARATION = Declaration(
    quick=["--sentences", "1000", "--allennlp-sentences", "100"],
    data=(WIKITEXT,),
)


def main(argv: list[str]) -> dict[str, Any]:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--sentences", type=int, default=100_000)
    parser.add_argument("--allennlp-sentences", type=int, default=2000)
    parser.add_argument("--clock", choices=list(CLOCKS), default="cpu")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    clock = CLOCKS[args.clock]

    source = wikitext_sentences(10**9)
    folder = tempfile.mkdtemp(prefix="elmo_embed_bench_")
    try:
        options_file, weights_file = write_random_elmo(PUBLISHED_SMALL, folder, args.seed)
        encoder = read_bilm_encoder(options_file, weights_file)
        quarter_file, input_file = (
            os.path.join(folder, "quarter.txt"),
            os.path.join(folder, "input.txt"),
        )
        write_input(quarter_file, source, args.sentences // 4)
        num_tokens = write_input(input_file, source, args.sentences)

        embed_file(encoder, quarter_file, os.path.join(folder, "quarter.hdf5"))
        rss_quarter = peak_rss_mb()
        start = clock()
        embed_file(encoder, input_file, os.path.join(folder, "out.hdf5"))
        ours_seconds = clock() - start
        rss_whole = peak_rss_mb()

        theirs = Elmo(
            options_file,
            weights_file,
            num_output_representations=1,
            dropout=0.0,
            scalar_mix_parameters=[1.0, 1.0, 1.0],
        ).eval()  # the average of the layers
        first = [source[index % len(source)] for index in range(args.allennlp_sentences)]
        their_tokens, their_seconds, max_abs_diff = 0, 0.0, 0.0
        with torch.no_grad(), h5py.File(os.path.join(folder, "out.hdf5"), "r") as ours:
            for start_index in range(0, len(first), 32):
                batch = first[start_index : start_index + 32]
                reset_allennlp_states(theirs)
                start = clock()
                output = theirs(batch_to_ids(batch))["elmo_representations"][0]
                their_seconds += clock() - start
                their_tokens += sum(len(sentence) for sentence in batch)
                for row, sentence in enumerate(batch):
                    mine = ours[str(start_index + row)][()].mean(axis=0)
                    theirs_row = output[row, : len(sentence)].numpy()
                    max_abs_diff = max(max_abs_diff, float(numpy.abs(mine - theirs_row).max()))
    finally:
        shutil.rmtree(folder)
    ours_rate, their_rate = num_tokens / ours_seconds, their_tokens / their_seconds
    return {
        "headline": ["end_to_end_speedup", "max_abs_diff", "peak_rss_mb_whole_file"],
        "data": f"{args.sentences} WikiText-2 valid sentences (cycled), {num_tokens} tokens",
        "model": "published small (2 x 1024/128, 2048 filters, 1 highway, clips 3), random weights",
        "torch_threads": torch.get_num_threads(),
        "clock": args.clock,
        "ours_elmo_embed_tokens_per_s": round(ours_rate, 1),
        "allennlp_elmo_tokens_per_s": round(their_rate, 1),
        "allennlp_sentences": args.allennlp_sentences,
        "end_to_end_speedup": round(ours_rate / their_rate, 2),
        "max_abs_diff": max_abs_diff,
        "peak_rss_mb_quarter_file": round(rss_quarter, 1),
        "peak_rss_mb_whole_file": round(rss_whole, 1),
    }


if __name__ == "__main__":
    run_benchmark(NAME, main)
