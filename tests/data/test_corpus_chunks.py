"""How the corpus loaders cut a corpus: chunks and pieces by one rule, byte ranges that tile
each shard, and an epoch order that depends on (seed, epoch) only."""

from elmo_plugin.data.corpus_chunks import (
    CorpusChunk,
    byte_ranges,
    chunk_order,
    corpus_chunks,
    split_chunk,
)


def test_chunks_and_pieces_tile_their_range_by_one_rule(tmp_path):
    shard = tmp_path / "shard.txt"
    shard.write_bytes(b"x" * 1000)
    chunks = corpus_chunks(str(shard), chunk_bytes=300)
    # a whole shard cut into chunks = the shard as one chunk cut into pieces of the same size
    assert chunks == split_chunk(CorpusChunk(str(shard), 0, 1000), 300)
    assert [(c.start, c.end) for c in chunks] == [(0, 333), (333, 666), (666, 1000)]
    pieces = split_chunk(chunks[1], 100)
    assert [(p.start, p.end) for p in pieces] == [(333, 444), (444, 555), (555, 666)]
    assert byte_ranges(str(shard), 10, 20, 300) == [CorpusChunk(str(shard), 10, 20)]
    compressed = CorpusChunk(str(tmp_path / "shard.txt.gz"), 0, None)
    assert split_chunk(compressed, 100) == [compressed]  # cannot be seeked: whole


def test_the_epoch_order_is_a_function_of_seed_and_epoch():
    assert chunk_order(5, shuffle=False, seed=1, epoch=3) == [0, 1, 2, 3, 4]
    orders = {tuple(chunk_order(50, True, seed, epoch)) for seed in (1, 2) for epoch in (0, 1)}
    assert len(orders) == 4 and all(sorted(order) == list(range(50)) for order in orders)
    assert chunk_order(50, True, 1, 0) == chunk_order(50, True, 1, 0)
