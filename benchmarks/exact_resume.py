"""Resume time early vs late in an epoch: the `elmo_corpus` data loader started at a checkpoint's
position (what `allennlp train -r` does with the `elmo_corpus_resume` callback). Against it:
allennlp's replay (its `multiprocess` loader producing every batch before the position, as `-r` does
without it), one run, on a generated 1B Word-shaped corpus. Usage:

    python -m benchmarks.exact_resume [--tokens 1_000_000] [--shards 4]

Both loaders: the original config's batch 128 of 20-token windows, shuffled, 0 workers (allennlp's
with `max_instances_in_memory` 12800 as the original config had); vocabulary the generated
tokens.txt (793,471 words). The positions are batch 5 and 90% of the epoch; a position's loader
state is taken from a first pass (not timed). Ends with one JSON line
(benchmarks/support/common.py): seconds to the first batch after each position (ours: the median of
5, early and late alternating, after one warm-up; the replay: once) and the late / early ratios.
"""

import statistics
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from allennlp.data.data_loaders import MultiProcessDataLoader

import elmo_plugin  # noqa: F401  (registers components)
from benchmarks.support.child import Child
from benchmarks.support.common import (
    Declaration,
    benchmark_parser,
    run_benchmark,
    scale_corpus_command,
)
from elmo_plugin.data.elmo_corpus_loader import ElmoCorpusLoader
from elmo_plugin.data.elmo_corpus_reader import ElmoCorpusReader
from elmo_plugin.data.elmo_tokens_vocabulary import ElmoTokensVocabulary

NAME = "exact_resume"
BATCH_SIZE = 128


def seconds_to_batch_after(batches: Iterator, position: int) -> float:
    """Seconds until the iterator yields its batch number `position + 1` (placeholders or replayed
    batches before it included)."""
    start = time.perf_counter()
    for _ in range(position + 1):
        next(batches)
    return time.perf_counter() - start


def ours(pattern: str, vocab, position: int, state: dict) -> float:
    loader = ElmoCorpusLoader(
        ElmoCorpusReader(max_sequence_length=20), pattern, batch_size=BATCH_SIZE, shuffle=True
    )
    loader.index_with(vocab)
    loader.resume_from(state)
    return seconds_to_batch_after(iter(loader), position)


def replay(pattern: str, vocab, position: int) -> float:
    loader = MultiProcessDataLoader(
        ElmoCorpusReader(max_sequence_length=20),
        pattern,
        batch_size=BATCH_SIZE,
        shuffle=True,
        max_instances_in_memory=BATCH_SIZE * 100,
        quiet=True,
    )
    loader.index_with(vocab)
    return seconds_to_batch_after(iter(loader), position)


def states_after_each_batch(pattern: str, vocab) -> list:
    """The loader's state_dict after each batch of epoch 0 (one pass, not timed)."""
    loader = ElmoCorpusLoader(
        ElmoCorpusReader(max_sequence_length=20),
        pattern,
        batch_size=BATCH_SIZE,
        shuffle=True,
        seed=1,
    )
    loader.index_with(vocab)
    return [loader.state_dict() for _ in loader]


DECLARATION = Declaration(
    quick=["--tokens", "300_000"],
    cheapest=["--tokens", "20000", "--shards", "1"],
    cheapest_status="ok",
)


def main(argv: list[str]) -> dict[str, Any]:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--tokens", type=int, default=1_000_000, help="1_000_000 works too")
    parser.add_argument("--shards", type=int, default=4)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as folder:
        corpus = Path(folder) / "corpus"
        command = scale_corpus_command(corpus, args.tokens, args.shards)
        Child(command, Path(folder) / "corpus.log").check()
        pattern = str(corpus / "*")
        vocab = ElmoTokensVocabulary.from_elmo_tokens_file(str(Path(folder) / "tokens.txt"))
        states = states_after_each_batch(pattern, vocab)
        epoch_length = len(states)
        early, late = 5, int(epoch_length * 0.9)
        figures: dict[str, Any] = {
            "batches_in_epoch": epoch_length,
            "early_batch": early,
            "late_batch": late,
        }
        positions = {"early": early, "late": late}
        ours_seconds: dict[str, list[float]] = {name: [] for name in positions}
        ours(
            pattern, vocab, early, states[early - 1]
        )  # warm-up: the first run after the pass is faster
        for _ in range(5):  # alternating, so that load from other processes hits both alike
            for name, position in positions.items():
                ours_seconds[name].append(ours(pattern, vocab, position, states[position - 1]))
        for name, position in positions.items():
            figures[f"ours_{name}_s"] = round(statistics.median(ours_seconds[name]), 3)
            figures[f"replay_{name}_s"] = round(replay(pattern, vocab, position), 3)
    figures["ours_late_over_early"] = round(figures["ours_late_s"] / figures["ours_early_s"], 2)
    figures["replay_late_over_early"] = round(
        figures["replay_late_s"] / figures["replay_early_s"], 2
    )
    figures["late_replay_over_ours"] = round(figures["replay_late_s"] / figures["ours_late_s"], 1)
    return {"headline": ["late_replay_over_ours", "ours_late_over_early"], **figures}


if __name__ == "__main__":
    run_benchmark(NAME, main)
