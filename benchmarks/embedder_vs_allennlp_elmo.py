"""Embedding speed: our `elmo_bilm_embedder` vs allennlp's `Elmo`, same weights, same sentences,
one run. Usage:

    python -m benchmarks.embedder_vs_allennlp_elmo [--max-tokens 20000] [--batch-size 32]
        [--original-tokens 1000]

Weights: the published "small" architecture (2 x 1024 cells / 128 projection, 2048 character
filters, 1 highway, cell and projection clip 3), randomly initialized, written as the standard
options.json + weights.hdf5 that both sides read. Sentences: WikiText-2 valid.txt
($ELMO_PLUGIN_DATA, default ../shared/data), headings skipped, lines split after " . ", in file
order, in batches of --batch-size. Batches alternate between the two sides so that load from
other processes hits both alike. allennlp's Elmo carries LSTM state from batch to batch; its
state is reset before each batch (not timed) so both compute the same function, and the max
absolute difference of the outputs is reported. Times are this process's CPU time
(`--clock cpu`, the default: other processes on a shared machine do not count) or wall time.
Ends with one JSON line (benchmarks/support/common.py): tokens/s of both, the ratio (`speedup`) and
`max_abs_diff`. The top-level keys are the published small size; `original_*` keys the same
comparison at the published original size (2 x 4096/512, 2 highway) on the first
--original-tokens tokens (0 skips it: allennlp's side is slow there). A `missed` key and exit
status 1 if the small speedup is under 10 or an output differs by more than 1e-5.
"""

import os
import shutil
import tempfile
import time
from typing import Any

import torch
from allennlp.data import Vocabulary
from allennlp.modules.elmo import Elmo, batch_to_ids

import elmo_plugin  # noqa: F401  (registers components)
from benchmarks.support.common import (
    CLOCKS,
    Declaration,
    benchmark_parser,
    parse_as_command,
    require_data,
    run_benchmark,
)
from benchmarks.support.wikitext_data import WIKITEXT, wikitext_file
from elmo_plugin.cpu.compiled_lstm_steps import compiled_steps
from elmo_plugin.elmo_files.options import architecture_from_options
from elmo_plugin.elmo_files.weights import write_bilm_encoder
from elmo_plugin.modules.bilm_encoder import BiLmEncoder
from elmo_plugin.token_embedders.elmo_bilm_embedder import ElmoBiLmEmbedder

NAME = "embedder_vs_allennlp_elmo"

PUBLISHED_SMALL: dict[str, dict[str, Any]] = {
    "lstm": {
        "use_skip_connections": True,
        "projection_dim": 128,
        "dim": 1024,
        "n_layers": 2,
        "cell_clip": 3,
        "proj_clip": 3,
    },
    "char_cnn": {
        "activation": "relu",
        "n_highway": 1,
        "embedding": {"dim": 16},
        "n_characters": 262,
        "max_characters_per_token": 50,
        "filters": [[1, 32], [2, 32], [3, 64], [4, 128], [5, 256], [6, 512], [7, 1024]],
    },
}


PUBLISHED_ORIGINAL = {
    "lstm": {**PUBLISHED_SMALL["lstm"], "projection_dim": 512, "dim": 4096},
    "char_cnn": {**PUBLISHED_SMALL["char_cnn"], "n_highway": 2},
}
TARGET_SPEEDUP, TOLERANCE = 10.0, 1e-5


def wikitext_sentences(max_tokens: int) -> list[list[str]]:
    path = wikitext_file()
    require_data(path)
    sentences, total = [], 0
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if not line or line.startswith("="):
            continue
        for sentence in line.replace(" . ", " .\n").split("\n"):
            tokens = sentence.split()
            if tokens and total < max_tokens:
                sentences.append(tokens)
                total += len(tokens)
    return sentences


def write_random_elmo(options: dict, folder: str, seed: int) -> tuple[str, str]:
    """Random weights (torch seeded with `seed`) of the architecture in `options`, written as
    FOLDER/options.json + FOLDER/weights.hdf5 -> their paths."""
    torch.manual_seed(seed)
    paths = os.path.join(folder, "options.json"), os.path.join(folder, "weights.hdf5")
    write_bilm_encoder(BiLmEncoder.from_architecture(architecture_from_options(options)), *paths)
    return paths


def reset_allennlp_states(elmo: Any) -> None:
    """Resets allennlp `Elmo`'s LSTM state (carried from batch to batch otherwise)."""
    elmo._elmo_lstm._elmo_lstm.reset_states()


def compare(
    options: dict, sentences: list[list[str]], batch_size: int, seed: int, clock=time.process_time
) -> dict[str, float]:
    """Both sides on the same random weights (written as options.json + weights.hdf5) and the same
    batches, alternating batch by batch: tokens/s of each, the ratio and the max abs difference."""
    batches = [
        batch_to_ids(sentences[i : i + batch_size]) for i in range(0, len(sentences), batch_size)
    ]
    num_tokens = sum(len(sentence) for sentence in sentences)
    folder = tempfile.mkdtemp(prefix="elmo_random_")
    options_file, weights_file = write_random_elmo(options, folder, seed)
    ours = ElmoBiLmEmbedder(Vocabulary(), pretrained_file=folder, dropout=0.0).eval()
    theirs = Elmo(options_file, weights_file, num_output_representations=1, dropout=0.0).eval()
    shutil.rmtree(folder)

    seconds = {"ours": 0.0, "allennlp": 0.0}
    max_abs_diff = 0.0
    with torch.no_grad():
        ours(batches[0])  # warm-up, not timed
        theirs(batches[0])
        for char_ids in batches:
            reset_allennlp_states(theirs)
            start = clock()
            expected = theirs(char_ids)["elmo_representations"][0]
            seconds["allennlp"] += clock() - start
            start = clock()
            actual = ours(char_ids)
            seconds["ours"] += clock() - start
            max_abs_diff = max(max_abs_diff, float((actual - expected).abs().max()))
    return {
        "tokens": num_tokens,
        "batches": len(batches),
        "ours_tokens_per_s": round(num_tokens / seconds["ours"], 1),
        "allennlp_elmo_tokens_per_s": round(num_tokens / seconds["allennlp"], 1),
        "speedup": round(seconds["allennlp"] / seconds["ours"], 2),
        "max_abs_diff": max_abs_diff,
    }


DECLARATION = Declaration(
    quick=["--max-tokens", "2000", "--original-tokens", "200"],
    data=(WIKITEXT,),
)


def main(argv: list[str]) -> dict[str, Any]:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--max-tokens", type=int, default=20000)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--original-tokens", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--clock", choices=list(CLOCKS), default="cpu")
    args = parse_as_command(parser, argv)

    sentences = wikitext_sentences(args.max_tokens)
    settings = (args.batch_size, args.seed, CLOCKS[args.clock])
    small = compare(PUBLISHED_SMALL, sentences, *settings)
    result: dict[str, Any] = {
        "headline": ["speedup", "max_abs_diff"],
        "data": f"{wikitext_file()}: {len(sentences)} sentences, {small.pop('tokens')} tokens, "
        f"{small.pop('batches')} batches of {args.batch_size}",
        "model": "published small (2 x 1024/128, 2048 filters, 1 highway, clips 3), random weights",
        "torch_threads": torch.get_num_threads(),
        "keep_freed_heap": args.keep_freed_heap,
        "clock": args.clock,
        "lstm_forward_loop": "c++" if compiled_steps() is not None else "reference",
        **small,
    }
    if args.original_tokens > 0:
        original = compare(PUBLISHED_ORIGINAL, wikitext_sentences(args.original_tokens), *settings)
        result["original_model"] = (
            "published original (2 x 4096/512, 2048 filters, 2 highway, clips 3)"
        )
        result.update({f"original_{key}": value for key, value in original.items()})
        result["headline"].append("original_speedup")
    worst = max(result["max_abs_diff"], result.get("original_max_abs_diff", 0.0))
    if result["speedup"] < TARGET_SPEEDUP or worst > TOLERANCE:
        result["missed"] = f"target speedup >= {TARGET_SPEEDUP} and max_abs_diff <= {TOLERANCE}"
    return result


if __name__ == "__main__":
    run_benchmark(NAME, main)
