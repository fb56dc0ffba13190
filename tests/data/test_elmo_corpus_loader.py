"""The `elmo_corpus` data loader's order: a function of (seed, epoch) whatever the number of
loader workers, every line once per epoch (split evenly across distributed processes), and a
resume that reads only from the chunk of its position on."""

import gzip
import multiprocessing
import os
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import torch
from allennlp.common.checks import ConfigurationError
from allennlp.data import Vocabulary

from elmo_plugin.data.corpus_chunks import corpus_chunks
from elmo_plugin.data.corpus_data_loader import CorpusDataLoader
from elmo_plugin.data.elmo_corpus_loader import ElmoCorpusLoader
from elmo_plugin.data.elmo_corpus_reader import ElmoCorpusReader, byte_range_lines

Batch = list[tuple[str, ...]]


def write_corpus(folder: Path) -> str:
    """4 shards of distinct lines (some longer than a window, some blank) -> their glob."""
    for shard in range(4):
        lines = [
            " ".join(f"w{shard}_{line}_{t}" for t in range(1 + (line * 7) % 13))
            for line in range(40 + shard)
        ]
        lines[5] = ""
        (folder / f"shard_{shard}.txt").write_text("\n".join(lines) + "\n")
    return str(folder / "shard_*.txt")


def corpus_texts(folder: Path) -> Counter:
    return Counter(
        line
        for path in folder.glob("shard_*.txt")
        for line in path.read_text().splitlines()
        if line
    )


def make_loader(pattern: str, **kwargs) -> ElmoCorpusLoader:
    options: dict[str, Any] = dict(batch_size=4, shuffle=True, chunk_bytes=300, seed=7)
    options.update(kwargs)
    loader = ElmoCorpusLoader(ElmoCorpusReader(max_sequence_length=5), pattern, **options)
    loader.index_with(Vocabulary.from_instances(loader.iter_instances()))
    return loader


def texts_of(loader: ElmoCorpusLoader, batch) -> Batch:
    """A batch as its instances' token strings (without <S> </S>)."""
    vocab = loader.vocab
    assert vocab is not None
    return [
        tuple(vocab.get_token_from_index(int(i), "tokens") for i in row if i)[1:-1]
        for row in batch["source"]["tokens"]["tokens"].tolist()
    ]


def epoch_batches(loader: ElmoCorpusLoader) -> list[Batch]:
    return [texts_of(loader, batch) for batch in loader]


def lines_of(batches: list[Batch]) -> Counter:
    """The multiset of lines the batches hold (a line's windows joined back in order)."""
    by_line: dict[tuple[str, str], list[tuple[int, tuple[str, ...]]]] = {}
    for batch in batches:
        for window in batch:
            shard, line, token = window[0][1:].split("_")
            by_line.setdefault((shard, line), []).append((int(token), window))
    return Counter(
        " ".join(t for _, window in sorted(windows) for t in window) for windows in by_line.values()
    )


def test_byte_ranges_cover_every_line_once(tmp_path):
    """Reading a shard range by range (seeking to each start) gives its lines once each."""
    pattern = write_corpus(tmp_path)
    chunks = corpus_chunks(pattern, chunk_bytes=100)
    assert len(chunks) > 8
    for path in sorted(tmp_path.glob("shard_*.txt")):
        ranges = [chunk for chunk in chunks if chunk.path == str(path)]
        read = [
            line
            for chunk in ranges
            for line in byte_range_lines(chunk.path, chunk.start, chunk.end)
        ]
        assert read == path.read_bytes().splitlines(keepends=True)


@pytest.mark.parametrize("num_workers", [0, 1, 2])
def test_every_line_once_per_epoch(tmp_path, num_workers):
    pattern = write_corpus(tmp_path)
    batches = epoch_batches(make_loader(pattern, num_workers=num_workers))
    assert lines_of(batches) == corpus_texts(tmp_path)
    assert max(len(batch) for batch in batches) == 4


def test_same_seed_and_epoch_same_batches_whatever_the_workers(tmp_path):
    pattern = write_corpus(tmp_path)
    runs = []
    for num_workers in (0, 1, 2):
        loader = make_loader(pattern, num_workers=num_workers)
        runs.append([epoch_batches(loader) for _ in range(2)])
    assert runs[0] == runs[1] == runs[2]
    epoch_0, epoch_1 = runs[0]
    assert epoch_0 != epoch_1 and lines_of(epoch_0) == lines_of(epoch_1)  # new order, same lines
    assert epoch_batches(make_loader(pattern, seed=8)) != epoch_0


def test_no_shuffle_reads_in_file_order(tmp_path):
    """shuffle false (validation, evaluate): the instances in corpus order."""
    pattern = write_corpus(tmp_path)
    loader = make_loader(pattern, shuffle=False)
    in_order = [window for batch in epoch_batches(loader) for window in batch]
    expected = [
        tuple(t.text for t in instance["source"].tokens[1:-1])
        for instance in loader.reader.read(pattern)
    ]
    assert in_order == expected


def test_distributed_processes_split_each_chunk_evenly(tmp_path):
    """2 processes: the same number of batches each, different lines, together every line once."""
    pattern = write_corpus(tmp_path)
    per_rank = []
    for rank in range(2):
        loader = make_loader(pattern)
        loader.world_size, loader.rank = 2, rank
        per_rank.append(epoch_batches(loader))
    assert len(per_rank[0]) == len(per_rank[1])
    assert lines_of(per_rank[0] + per_rank[1]) == corpus_texts(tmp_path)
    assert not set(map(tuple, per_rank[0])) & set(map(tuple, per_rank[1]))


@pytest.mark.parametrize("num_workers, fixed_shape", [(0, False), (2, False), (2, True)])
def test_resume_continues_with_the_remaining_batches_reading_from_its_chunk_only(
    tmp_path, num_workers, fixed_shape
):
    """A loader resumed from the state after batch k of epoch 1 yields the epoch-0 and first k
    batches as empty placeholders, then exactly the uninterrupted epoch's batches k+1...; the
    reader produces only the instances of the chunks from the position's chunk on."""
    pattern = write_corpus(tmp_path)
    whole = make_loader(pattern, fixed_shape=fixed_shape)
    epoch_0_count = len(epoch_batches(whole))
    iterator = iter(whole)
    head = [texts_of(whole, next(iterator)) for _ in range(17)]
    state = whole.state_dict()
    tail = [texts_of(whole, batch) for batch in iterator]

    resumed = make_loader(
        pattern, seed=None, num_workers=num_workers, fixed_shape=fixed_shape
    )  # the seed comes from the state
    read = multiprocessing.Value("i", 0)  # shared with the loader's forked workers
    range_instances = resumed.reader.range_instances

    def counting(path, start=0, end=None, stats=None):
        for instance in range_instances(path, start, end, stats):
            with read.get_lock():
                read.value += 1
            yield instance

    resumed.reader.range_instances = counting
    resumed.resume_from(state)
    assert list(resumed) == [{}] * epoch_0_count
    batches = list(resumed)
    assert batches[:17] == [{}] * 17
    assert [texts_of(resumed, batch) for batch in batches[17:]] == tail
    order = whole.chunk_order(1)[state["chunk_ordinal"] :]
    chunks = [resumed.chunks[i] for i in order]
    expected = sum(len(list(whole.reader.range_instances(c.path, c.start, c.end))) for c in chunks)
    assert read.value == expected < sum(len(batch) for batch in head + tail)
    assert resumed.state_dict()["epoch_batches"] == [epoch_0_count, 17 + len(tail)]


@pytest.mark.parametrize("num_workers, world_size", [(0, 1), (2, 1), (0, 2)])
def test_bucketed_batches_hold_every_line_once_with_less_padding(tmp_path, num_workers, world_size):
    """bucket_by_length: the same lines, sorted by length within a chunk (far less padding than
    shuffled batches), the batch order still drawn by (seed, epoch), the same for any workers."""
    pattern = write_corpus(tmp_path)

    def epochs(bucket: bool, workers: int) -> list[list[Batch]]:
        runs = []
        for rank in range(world_size):
            loader = make_loader(
                pattern, bucket_by_length=bucket, num_workers=workers, chunk_bytes=2000
            )
            loader.world_size, loader.rank = world_size, rank
            runs.append([epoch_batches(loader) for _ in range(2)])
        return [sum((run[epoch] for run in runs), []) for epoch in range(2)]

    bucketed, shuffled = epochs(True, num_workers), epochs(False, 0)
    assert lines_of(bucketed[0]) == lines_of(bucketed[1]) == corpus_texts(tmp_path)
    assert bucketed[0] != bucketed[1]  # another order in the next epoch
    assert epochs(True, 0) == bucketed  # whatever the workers

    def padding(batches: list[Batch]) -> int:
        return sum(max(map(len, batch)) * len(batch) - sum(map(len, batch)) for batch in batches)

    assert padding(bucketed[0]) < padding(shuffled[0]) / 3


def test_compressed_shard_is_one_chunk(tmp_path):
    """A .gz shard cannot be seeked: it is one chunk, read whole; its lines are there once."""
    write_corpus(tmp_path)
    expected = corpus_texts(tmp_path)
    plain = tmp_path / "shard_3.txt"
    (tmp_path / "shard_3.txt.gz").write_bytes(gzip.compress(plain.read_bytes()))
    plain.unlink()
    chunks = corpus_chunks(str(tmp_path / "shard_*"), chunk_bytes=300)
    assert [chunk.end for chunk in chunks if chunk.path.endswith(".gz")] == [None]
    assert lines_of(epoch_batches(make_loader(str(tmp_path / "shard_*")))) == expected


def test_a_folder_is_read_as_its_files_without_hidden_files_or_subfolders(tmp_path):
    folder = tmp_path / "corpus"
    folder.mkdir()
    write_corpus(folder)
    (folder / ".notes.txt").write_text("hidden never read\n")
    (folder / "old").mkdir()
    (folder / "old" / "shard_9.txt").write_text("in a subfolder never read\n")
    assert lines_of(epoch_batches(make_loader(str(folder)))) == corpus_texts(folder)
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigurationError, match="no file matches"):
        make_loader(str(tmp_path / "empty"))


def test_bad_settings_are_one_line_errors(tmp_path):
    pattern = write_corpus(tmp_path)
    with pytest.raises(ConfigurationError, match="chunk_bytes must be at least 1"):
        make_loader(pattern, chunk_bytes=0)
    with pytest.raises(ConfigurationError, match="no file matches"):
        make_loader(str(tmp_path / "nothing*.txt"))
    state = make_loader(pattern).state_dict()
    with pytest.raises(
        ConfigurationError, match="batch_size 4, 1 processes, not in .* batch_size 8"
    ):
        make_loader(pattern, batch_size=8).resume_from(state)


def test_the_length_is_estimated_from_the_first_chunk_then_exact_after_an_epoch(tmp_path):
    loader = make_loader(write_corpus(tmp_path))
    estimate = len(loader)
    assert loader.length_is_estimate
    batches = epoch_batches(loader)
    assert abs(estimate - len(batches)) <= 0.2 * len(batches)  # lines of one distribution
    assert len(loader) == len(batches) and not loader.length_is_estimate
    assert len(epoch_batches(loader)) == len(batches)  # every epoch has as many


def test_a_resumed_loader_knows_the_exact_length_of_its_finished_epochs(tmp_path):
    pattern = write_corpus(tmp_path)
    first = make_loader(pattern)
    exact = len(epoch_batches(first))
    next(iter(first))  # one batch into the second epoch
    resumed = make_loader(pattern)
    resumed.resume_from(first.state_dict())
    assert len(resumed) == exact and not resumed.length_is_estimate


def test_the_length_under_distributed_training_is_each_processs_share(tmp_path):
    pattern = write_corpus(tmp_path)
    lengths = []
    for rank in range(2):
        loader = make_loader(pattern)
        loader.world_size, loader.rank = 2, rank
        estimate = len(loader)
        lengths.append((estimate, len(epoch_batches(loader))))
    assert lengths[0][1] == lengths[1][1]  # every process has as many batches
    for estimate, exact in lengths:
        assert abs(estimate - exact) <= 0.2 * exact


def test_a_corpus_loader_that_does_not_say_how_it_batches_cannot_be_made(tmp_path):
    """`epoch_batches` and `__len__` are what each corpus loader must give."""

    class NoBatches(CorpusDataLoader):
        def __len__(self) -> int:
            return 0

    with pytest.raises(TypeError, match="abstract method.*epoch_batches"):
        NoBatches(ElmoCorpusReader(), write_corpus(tmp_path), 4, False, 300, 0, None, None)


def tensors_of(batch) -> list[torch.Tensor]:
    """Every tensor of a batch, in order (text fields' nested dicts flattened)."""
    return [
        tensor
        for value in batch.values()
        for tensor in (
            [t for keys in value.values() for t in keys.values()]
            if isinstance(value, dict)
            else [value]
        )
    ]


@pytest.mark.parametrize("num_workers, world_size", [(0, 1), (1, 1), (0, 2)])
def test_fixed_shape_batches_have_batch_size_rows_of_the_longest_window_in_every_tensor(
    tmp_path, num_workers, world_size
):
    """Chunks of 300 bytes (a short last chunk in each shard; batches of 3 or 4 windows of 3 to
    7 tokens): every tensor of every batch of two epochs is 4 x 7 (5 tokens + <S> </S>), and
    there are as many batches as without `fixed_shape`."""
    pattern = write_corpus(tmp_path)
    for rank in range(world_size):
        loaders = [
            make_loader(pattern, num_workers=num_workers, fixed_shape=fixed)
            for fixed in (False, True)
        ]
        for loader in loaders:
            loader.world_size, loader.rank = world_size, rank
        for _ in range(2):
            plain, fixed = (list(loader) for loader in loaders)
            assert len(fixed) == len(plain)
            assert {tuple(t.shape) for batch in plain for t in tensors_of(batch)} > {(4, 7)}
            assert {tuple(t.shape) for batch in fixed for t in tensors_of(batch)} == {
                (4, 7),
                (4, 7, 50),
            }


def padding(unpadded, padded) -> tuple[int, int]:
    """(rows, positions) that `padded` adds to `unpadded`, asserting that every tensor of
    `padded` holds its unpadded one in its first rows and positions and zeros elsewhere."""
    added = set()
    for small, large in zip(tensors_of(unpadded), tensors_of(padded), strict=True):
        corner = tuple(slice(0, size) for size in small.shape)
        assert torch.equal(large[corner], small)
        rest = large.clone()
        rest[corner] = 0
        assert not rest.any()
        if small.dim() > 1:  # a text field's (batch, timesteps, ...)
            added.add((large.size(0) - small.size(0), large.size(1) - small.size(1)))
    (rows_and_positions,) = added  # the same in every text field's tensors
    return rows_and_positions


@pytest.mark.parametrize("num_workers", [0, 1])
def test_a_fixed_shape_batch_holds_the_unpadded_batch_first_and_zeros_elsewhere(
    tmp_path, num_workers
):
    pattern = write_corpus(tmp_path)
    plain = list(make_loader(pattern))
    fixed = list(make_loader(pattern, num_workers=num_workers, fixed_shape=True))
    added = [padding(unpadded, padded) for unpadded, padded in zip(plain, fixed, strict=True)]
    assert {rows for rows, _ in added} == {0, 1} and {positions for _, positions in added} == {
        0,
        1,
        2,
    }


def test_fixed_shape_needs_the_readers_max_sequence_length(tmp_path):
    with pytest.raises(
        ConfigurationError,
        match="elmo_corpus: fixed_shape needs the dataset reader's max_sequence_length",
    ):
        ElmoCorpusLoader(ElmoCorpusReader(), write_corpus(tmp_path), 4, fixed_shape=True)


@pytest.mark.parametrize("num_workers", [0, 1])
def test_batches_for_a_cuda_device_are_pinned_in_the_main_process_and_copied_without_blocking(
    tmp_path, monkeypatch, num_workers
):
    """The copies' logic on the CPU (tests/cuda runs it on a GPU): each tensor of each batch is
    pinned once, in the main process (in no worker), then copied with `non_blocking`."""
    pattern = write_corpus(tmp_path)
    expected = list(make_loader(pattern, fixed_shape=True))
    loader = make_loader(pattern, num_workers=num_workers, fixed_shape=True)
    loader.set_target_device(torch.device("cuda", 0))
    pins = multiprocessing.Value("i", 0)  # in any process, the forked workers too
    pinned_here: list[int] = []
    copies: list[tuple[Any, ...]] = []

    def pin_memory(tensor: torch.Tensor) -> torch.Tensor:
        with pins.get_lock():
            pins.value += 1
        pinned_here.append(os.getpid())
        return tensor

    monkeypatch.setattr(torch.Tensor, "pin_memory", pin_memory)
    monkeypatch.setattr(torch.Tensor, "to", lambda t, *args, **kw: copies.append((args, kw)) or t)
    batches = list(loader)
    monkeypatch.undo()
    tensors = sum(len(tensors_of(batch)) for batch in batches)
    assert pins.value == len(pinned_here) == tensors
    assert set(pinned_here) == {os.getpid()}
    assert copies == [((torch.device("cuda", 0),), {"non_blocking": True})] * tensors
    for mine, theirs in zip(batches, expected, strict=True):
        assert all(map(torch.equal, tensors_of(mine), tensors_of(theirs)))


def test_batches_for_the_cpu_are_the_collated_tensors_themselves_unpinned(tmp_path, monkeypatch):
    pattern = write_corpus(tmp_path)
    loader = make_loader(pattern)
    loader.set_target_device(torch.device("cpu"))
    collated: list[dict] = []
    collate = loader.collate
    monkeypatch.setattr(
        loader, "collate", lambda batch: collated.append(collate(batch)) or collated[-1]
    )
    pinned: list[int] = []
    monkeypatch.setattr(torch.Tensor, "pin_memory", lambda t: pinned.append(1) or t)
    batches = list(loader)
    monkeypatch.undo()
    assert not pinned
    assert [id(t) for b in batches for t in tensors_of(b)] == [
        id(t) for b in collated for t in tensors_of(b)
    ]
