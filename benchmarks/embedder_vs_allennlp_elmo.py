"""Embedding speed: our `elmo_bilm_embedder` vs allennlp's `Elmo`, same weights, same sentences,
one run. Usage:

    python benchmarks/embedder_vs_allennlp_elmo.py [--max-tokens 20000] [--batch-size 32]

Weights: the published "small" architecture (2 x 1024 cells / 128 projection, 2048 character
filters, 1 highway, cell and projection clip 3), randomly initialized, written as the standard
options.json + weights.hdf5 that both sides read. Sentences: WikiText-2 valid.txt
($ELMO_PLUGIN_DATA, default ../shared/data), headings skipped, lines split after " . ", in file
order, in batches of --batch-size. Batches alternate between the two sides so that load from
other processes hits both alike. allennlp's Elmo carries LSTM state from batch to batch; its
state is reset before each batch (not timed) so both compute the same function, and the max
absolute difference of the outputs is reported. Prints tokens/s of both, the ratio and the
max abs difference.
"""
import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import List

import torch

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

import elmo_plugin  # noqa: E402,F401  (registers components)
from allennlp.data import Vocabulary  # noqa: E402
from allennlp.modules.elmo import Elmo, batch_to_ids  # noqa: E402

from benchmarks.wikitext_data import wikitext_file  # noqa: E402

from elmo_plugin.elmo_files.options import architecture_from_options  # noqa: E402
from elmo_plugin.elmo_files.weights import write_bilm_encoder  # noqa: E402
from elmo_plugin.modules.bilm_encoder import BiLmEncoder  # noqa: E402
from elmo_plugin.token_embedders.elmo_bilm_embedder import ElmoBiLmEmbedder  # noqa: E402

PUBLISHED_SMALL = {
    "lstm": {"use_skip_connections": True, "projection_dim": 128, "dim": 1024, "n_layers": 2,
             "cell_clip": 3, "proj_clip": 3},
    "char_cnn": {"activation": "relu", "n_highway": 1, "embedding": {"dim": 16}, "n_characters": 262,
                 "max_characters_per_token": 50,
                 "filters": [[1, 32], [2, 32], [3, 64], [4, 128], [5, 256], [6, 512], [7, 1024]]},
}


def wikitext_sentences(max_tokens: int) -> List[List[str]]:
    path = wikitext_file()
    if not path.is_file():
        raise SystemExit(f"SKIP: real data not found at {path} (set ELMO_PLUGIN_DATA to the shared data folder)")
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--max-tokens", type=int, default=20000)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    sentences = wikitext_sentences(args.max_tokens)
    batches = [batch_to_ids(sentences[i : i + args.batch_size]) for i in range(0, len(sentences), args.batch_size)]
    num_tokens = sum(len(sentence) for sentence in sentences)

    torch.manual_seed(args.seed)
    folder = tempfile.mkdtemp(prefix="elmo_small_random_")
    options_file, weights_file = os.path.join(folder, "options.json"), os.path.join(folder, "weights.hdf5")
    write_bilm_encoder(BiLmEncoder.from_architecture(architecture_from_options(PUBLISHED_SMALL)), options_file, weights_file)
    ours = ElmoBiLmEmbedder(Vocabulary(), pretrained_file=folder, dropout=0.0).eval()
    theirs = Elmo(options_file, weights_file, num_output_representations=1, dropout=0.0).eval()

    seconds = {"ours": 0.0, "allennlp": 0.0}
    max_abs_diff = 0.0
    with torch.no_grad():
        ours(batches[0])  # warm-up, not timed
        theirs(batches[0])
        for char_ids in batches:
            theirs._elmo_lstm._elmo_lstm.reset_states()
            start = time.perf_counter()
            expected = theirs(char_ids)["elmo_representations"][0]
            seconds["allennlp"] += time.perf_counter() - start
            start = time.perf_counter()
            actual = ours(char_ids)
            seconds["ours"] += time.perf_counter() - start
            max_abs_diff = max(max_abs_diff, float((actual - expected).abs().max()))

    result = {
        "data": f"{wikitext_file()}: {len(sentences)} sentences, {num_tokens} tokens, "
                f"{len(batches)} batches of {args.batch_size}",
        "model": "published small (2 x 1024/128, 2048 filters, 1 highway, clips 3), random weights",
        "torch_threads": torch.get_num_threads(),
        "ours_tokens_per_s": round(num_tokens / seconds["ours"], 1),
        "allennlp_elmo_tokens_per_s": round(num_tokens / seconds["allennlp"], 1),
        "speedup": round(seconds["allennlp"] / seconds["ours"], 2),
        "max_abs_diff": max_abs_diff,
    }
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
