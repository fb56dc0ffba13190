"""`elmo-embed`'s fixed-shape path (what every device but the CPU runs), run on CPU tensors: each
bucket's vectors equal each sentence embedded alone, its computation reads nothing on the host
and runs one op trace per bucket, and whole files equal the CPU path's (options, shards, a
resumed run); `--precision bf16` against float32; the writer thread's errors."""

import contextlib
import os
from collections.abc import Callable

import h5py
import numpy
import pytest
import torch
from allennlp.common.checks import ConfigurationError

from benchmarks.support.op_audit import OpAudit
from elmo_plugin.commands import elmo_embed
from elmo_plugin.commands.bucketed_batches import (
    BUCKET_WIDTHS,
    Bucket,
    bucket_ids,
    bucket_rows,
    bucket_width,
    bucketed_batches,
    id_table,
)
from elmo_plugin.commands.embed_input import Shard
from elmo_plugin.commands.line_vectors import VectorForm
from elmo_plugin.commands.writer_thread import WriterThread
from elmo_plugin.data.full_disk import DiskFull
from elmo_plugin.modules.bilm_encoder import BiLmEncoder
from elmo_plugin.modules.bilm_sentence_layers import sentence_layers
from elmo_plugin.modules.device_paths import gpu_path_on_cpu
from tests.elmo_files.elmo_reference import random_encoder

WORDS = ["the", "file", "is", "open", "x" * 70, "caf\u00e9", ".", "a"]
TEXT = [
    " ".join(WORDS[(i + j) % len(WORDS)] for j in range(n))
    for i, n in enumerate([5, 0, 1, 7, 12, 0, 3, 22, 1, 9, 50, 6, 2, 0, 15, 4])
]


DEFAULT_FORM = VectorForm()


@pytest.fixture(scope="module")
def encoder() -> BiLmEncoder:
    """A tiny clipped biLM with random weights: the CPU's own paths (the reference)."""
    return random_encoder(3.0)


def on_path(fixed: bool) -> contextlib.AbstractContextManager:
    """Where `fixed`, the GPU's paths on the CPU (`gpu_path_on_cpu`): `embed_file` takes the
    fixed-shape path, the character CNN its `reference`, the LSTM its whole-sequence function."""
    return gpu_path_on_cpu() if fixed else contextlib.nullcontext()


def alone(encoder: BiLmEncoder, tokens: list[str]) -> torch.Tensor:
    """(num_layers, tokens, dim): one sentence through `sentence_layers`, no padding, no cache."""
    characters = encoder.characters
    bos, eos = characters.boundary_tokens
    ids = torch.tensor([[characters.token_ids(t) for t in [bos, *tokens, eos]]])
    with torch.no_grad():
        return sentence_layers(encoder, ids)[0][0]


def bucket_of(lengths: list[int], width: int, rows: int) -> Bucket:
    sentences = [
        (i, [WORDS[(i + j) % len(WORDS)] for j in range(n)]) for i, n in enumerate(lengths)
    ]
    return Bucket(sentences, rows, width)


def bucket_lengths(width: int) -> list[int]:
    """Sentence lengths of this bucket: the longest it takes, the shortest, one between (a
    one-token sentence in the first)."""
    shortest = max(1, BUCKET_WIDTHS[BUCKET_WIDTHS.index(width) - 1] - 1 if width > 8 else 1)
    return sorted({width - 2, shortest, (width - 2 + shortest) // 2})


def host_ids(encoder: BiLmEncoder, bucket: Bucket) -> torch.Tensor:
    """The bucket's token ids (rows, width, 50) as `fixed_shape_batches` builds them."""
    characters = encoder.characters
    chunk = [(0, tokens) for _, tokens in bucket.batch]
    table = id_table(chunk, characters.token_ids, characters.boundary_tokens)
    return bucket_ids(bucket, table, characters.boundary_tokens)


def embed(encoder: BiLmEncoder, ids: torch.Tensor, form=DEFAULT_FORM, precision="fp32"):
    """A bucket through `embed_bucket` on the GPU's paths."""
    with torch.no_grad(), gpu_path_on_cpu():
        return elmo_embed.embed_bucket(encoder, ids, form, precision)


@pytest.mark.parametrize("width", BUCKET_WIDTHS[:7])
def test_every_bucket_shape_equals_each_sentence_embedded_alone_with_zero_padding(encoder, width):
    lengths = bucket_lengths(width)
    assert {bucket_width(n + 2) for n in lengths} == {width}
    bucket = bucket_of(lengths, width, rows=len(lengths) + 2)  # two padding rows
    vectors = embed(encoder, host_ids(encoder, bucket))
    assert vectors.shape == (len(lengths) + 2, 3, width - 2, 32)
    for row, (_, tokens) in enumerate(bucket.batch):
        torch.testing.assert_close(
            vectors[row, :, : len(tokens)], alone(encoder, tokens), atol=1e-5, rtol=0
        )
        assert not vectors[row, :, len(tokens) :].any()
    assert not vectors[len(lengths) :].any()


@pytest.mark.parametrize(
    "form",
    [
        VectorForm(),
        VectorForm("average", "mean", "float16"),
        VectorForm("top", "max"),
        VectorForm("mix", "mean", mix_weights=torch.tensor([0.2, 0.5, 0.3]), mix_gamma=1.5),
    ],
    ids=["all", "average-mean-float16", "top-max", "mix-mean"],
)
def test_pooling_layers_and_casts_on_the_device_equal_numpy_over_each_sentence_alone(encoder, form):
    bucket = bucket_of([1, 3, 6], 8, rows=5)
    vectors = embed(encoder, host_ids(encoder, bucket), form)
    assert vectors.dtype == getattr(torch, form.dtype)
    for row, (_, tokens) in enumerate(bucket.batch):
        layers = alone(encoder, tokens).numpy()
        selected = {"all": layers, "average": layers.mean(axis=0), "top": layers[-1]}.get(
            form.layers
        )
        if form.mix_weights is not None:
            mix = form.mix_weights.numpy()
            selected = form.mix_gamma * numpy.einsum("l,ltd->td", mix, layers)
        pooled = {"none": selected, "mean": selected.mean(axis=-2), "max": selected.max(axis=-2)}
        want = pooled[form.pool].astype(form.dtype)
        got = vectors[row].numpy() if form.pool != "none" else vectors[row, :, : len(tokens)]
        numpy.testing.assert_allclose(got, want, atol=1e-5 if form.dtype == "float32" else 4e-3)


@pytest.mark.parametrize(
    "form, precision",
    [(VectorForm(), "fp32"), (VectorForm("average", "mean", "float16"), "bf16")],
    ids=["all-fp32", "average-mean-float16-bf16"],
)
def test_a_bucket_computation_reads_nothing_on_the_host_and_runs_one_op_trace(
    encoder, form, precision
):
    """What runs on the GPU between the ids' copy in and the vectors' copy out, recorded on CPU
    tensors: no op that syncs or makes a data-dependent shape, and the same ops on the same
    shapes for two batches of one bucket (other sentences, other lengths, other padding)."""
    audits = []
    for lengths in ([1, 3, 6, 6], [2, 5]):
        ids = host_ids(encoder, bucket_of(lengths, 8, rows=4))
        with OpAudit() as audit:
            embed(encoder, ids, form, precision)
        audits.append(audit)
    assert audits[0].syncs() == [] and audits[1].syncs() == []
    assert audits[0].trace() == audits[1].trace() and len(audits[0].trace()) > 50


def test_buckets_hold_each_sentence_once_within_the_token_budget():
    chunk = [(i, text.split()) for i, text in enumerate(TEXT) if text]
    buckets = list(bucketed_batches(chunk, batch_size=3, batch_tokens=40))
    assert sorted(i for b in buckets for i, _ in b.batch) == [i for i, _ in chunk]
    for bucket in buckets:
        assert bucket.rows == bucket_rows(bucket.width, 3, 40) >= len(bucket.batch) >= 1
        assert bucket.rows * bucket.width <= 40 or bucket.rows == 1
        assert {bucket_width(len(tokens) + 2) for _, tokens in bucket.batch} == {bucket.width}
    assert bucket_width(52) == 64 and bucket_width(513) == 768 and bucket_width(1) == 8


def recording(calls: list, function: Callable) -> Callable:
    """`function`, appending its name to `calls` on every call."""

    def run(*args, **kwargs):
        calls.append(function.__name__)
        return function(*args, **kwargs)

    return run


def read(path):
    with h5py.File(path, "r") as vectors:
        return {name: (vectors[name][()], dict(vectors[name].attrs)) for name in vectors}


@pytest.fixture(scope="module")
def text_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("text") / "input.txt"
    path.write_text("\n".join(TEXT) + "\n", encoding="utf-8")
    return path


def assert_same_file(fixed, cpu, atol):
    assert fixed.keys() == cpu.keys()
    for name, (value, attrs) in cpu.items():
        if name == "sentence_to_index":
            assert fixed[name][0][0] == value[0]
            continue
        assert fixed[name][0].dtype == value.dtype and fixed[name][1] == attrs, name
        numpy.testing.assert_allclose(fixed[name][0], value, atol=atol, rtol=0)


SMALL = elmo_embed.Batching(batch_size=4, batch_tokens=64, sort_window=6)


@pytest.mark.parametrize(
    "layers, output_format, shard",
    [
        ("all", elmo_embed.OutputFormat(), Shard()),
        ("average", elmo_embed.OutputFormat(pool="mean"), Shard()),
        ("all", elmo_embed.OutputFormat(pool="max", dtype="float16"), Shard()),
        ("top", elmo_embed.OutputFormat(dtype="float16", compression="gzip"), Shard(1, 2, 6)),
    ],
    ids=["all", "average-mean", "max-float16", "top-float16-shard"],
)
def test_embed_file_on_the_fixed_shape_path_equals_the_cpu_path(
    encoder, text_file, tmp_path, layers, output_format, shard, monkeypatch
):
    """Every dataset (empty lines, a one-token line, a 50-token one), its attributes and
    sentence_to_index; float16 values within one float16 step."""
    ran = []
    for path in ("cpu_batches", "fixed_shape_batches"):
        monkeypatch.setattr(elmo_embed, path, recording(ran, getattr(elmo_embed, path)))
    outputs = {}
    for name, fixed in (("cpu", False), ("fixed", True)):
        path = tmp_path / f"{name}.hdf5"
        with on_path(fixed):
            elmo_embed.embed_file(
                encoder,
                str(text_file),
                str(path),
                layers,
                SMALL,
                output_format=output_format,
                shard=shard,
            )
        outputs[name] = read(path)
        assert set(ran) == {"fixed_shape_batches" if fixed else "cpu_batches"}
        ran.clear()
    atol = 1e-5 if output_format.dtype == "float32" else 4e-3
    assert_same_file(outputs["fixed"], outputs["cpu"], atol)
    assert len(outputs["cpu"]) == 1 + len(list(shard.owned(text_file.read_bytes().splitlines())))


def test_a_resumed_fixed_shape_run_equals_the_uninterrupted_one_bit_for_bit(
    encoder, text_file, tmp_path, monkeypatch
):
    whole = tmp_path / "whole.hdf5"
    with gpu_path_on_cpu():
        elmo_embed.embed_file(encoder, str(text_file), str(whole), "all", SMALL)
    calls = []
    embed_chunk = elmo_embed.embed_chunk

    def fail_on_second_chunk(*args):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        embed_chunk(*args)

    monkeypatch.setattr(elmo_embed, "embed_chunk", fail_on_second_chunk)
    output = tmp_path / "out.hdf5"
    with pytest.raises(KeyboardInterrupt), gpu_path_on_cpu():
        elmo_embed.embed_file(encoder, str(text_file), str(output), "all", SMALL)
    with h5py.File(str(output) + elmo_embed.PARTIAL_SUFFIX, "r") as partial:
        assert partial.attrs[elmo_embed.LINES_DONE] == 8  # the first window (6 sentences)
    monkeypatch.setattr(elmo_embed, "embed_chunk", embed_chunk)
    with gpu_path_on_cpu():
        elmo_embed.embed_file(encoder, str(text_file), str(output), "all", SMALL, resume=True)
    resumed, uninterrupted = read(output), read(whole)
    assert resumed.keys() == uninterrupted.keys()
    for name, (value, _) in uninterrupted.items():
        numpy.testing.assert_array_equal(resumed[name][0], value)


@pytest.mark.parametrize("fixed", [False, True], ids=["cpu", "fixed"])
def test_bf16_is_within_two_percent_of_the_largest_value_of_float32_and_tf32_is_float32(
    encoder, text_file, tmp_path, fixed
):
    outputs = {}
    for precision in ("fp32", "tf32", "bf16"):
        path = tmp_path / f"{precision}.hdf5"
        with on_path(fixed):
            elmo_embed.embed_file(
                encoder, str(text_file), str(path), "all", SMALL, precision=precision
            )
        outputs[precision] = read(path)
    numbers = [name for name in outputs["fp32"] if name != "sentence_to_index"]
    largest = max(float(numpy.abs(outputs["fp32"][n][0]).max(initial=0)) for n in numbers)
    for name in numbers:
        want = outputs["fp32"][name][0]
        numpy.testing.assert_array_equal(outputs["tf32"][name][0], want)
        numpy.testing.assert_allclose(outputs["bf16"][name][0], want, atol=0.02 * largest, rtol=0)
    assert not all(numpy.array_equal(outputs["bf16"][n][0], outputs["fp32"][n][0]) for n in numbers)


def test_a_resume_with_another_precision_is_refused(encoder, text_file, tmp_path, monkeypatch):
    def interrupted(*args):
        raise KeyboardInterrupt

    monkeypatch.setattr(elmo_embed, "embed_chunk", interrupted)
    output = str(tmp_path / "out.hdf5")
    with pytest.raises(KeyboardInterrupt):
        elmo_embed.embed_file(encoder, str(text_file), output, "all", SMALL)
    monkeypatch.undo()
    with pytest.raises(ConfigurationError, match="written with --precision 'fp32', this run has"):
        elmo_embed.embed_file(encoder, str(text_file), output, "all", SMALL, True, precision="bf16")


def test_an_error_in_the_writer_thread_is_raised_again_by_the_next_submit_and_drops_the_rest():
    done = []
    failure = ValueError("no room")

    def fail():
        raise failure

    with pytest.raises(ValueError) as raised:
        with WriterThread(depth=1) as background:
            background.submit(done.append, 1)
            background.submit(fail)
            for value in range(2, 100):  # raised once the thread has met it
                background.submit(done.append, value)
    assert raised.value is failure and done[0] == 1 and len(done) < 98
    with pytest.raises(ValueError) as raised:
        with WriterThread() as background:
            background.submit(fail)
    assert raised.value is failure  # on leaving `with`, when no later submit met it


def test_a_full_disk_met_by_the_writer_thread_stops_embed_file_with_its_error(
    encoder, text_file, tmp_path, monkeypatch
):
    """The same DiskFull as the writer raised, the partial file whole with the lines recorded
    before it, for --resume."""
    full = DiskFull("cannot write out.hdf5: the disk is full")
    write_batch = elmo_embed._Writer.write_batch
    calls = []

    def full_on_third_batch(self, *args):
        calls.append(1)
        if len(calls) == 3:
            raise full
        write_batch(self, *args)

    monkeypatch.setattr(elmo_embed._Writer, "write_batch", full_on_third_batch)
    output = str(tmp_path / "out.hdf5")
    with pytest.raises(DiskFull, match="the disk is full; .*keeps the lines recorded as done"):
        elmo_embed.embed_file(encoder, str(text_file), output, "all", SMALL)
    assert not os.path.exists(output)
    with h5py.File(output + elmo_embed.PARTIAL_SUFFIX, "r") as partial:
        assert partial.attrs[elmo_embed.LINES_DONE] == 8  # the first window (6 sentences)
