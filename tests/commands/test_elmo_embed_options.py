"""`allennlp elmo-embed`'s output options against independent computations: pooling (numpy over
the unpooled rows), float16 and compression (numpy's cast of the float32 file), the learned mix
(the tagger's own ScalarMix), shards (their union is the unsharded file), standard input and
compressed inputs (the plain file's output), and their bad inputs."""

import bz2
import gzip
import json
import lzma
import os

import h5py
import numpy
import pytest
import torch
from allennlp.common.checks import ConfigurationError
from allennlp.models.archival import load_archive
from allennlp.modules.scalar_mix import ScalarMix
from mktestdocs import grab_code_blocks

from elmo_plugin.archives.bilm_source import load_bilm_encoder
from elmo_plugin.commands import elmo_embed
from elmo_plugin.commands.embed_input import Shard, parse_shard
from elmo_plugin.commands.learned_mix import read_learned_mix
from tests.helpers import (
    REPO_ROOT,
    killed_after_two_records,
    lines_done_records,
    many_lines,
    run_allennlp,
    run_allennlp_in_process,
)

# The sort window of each line of TEXT at --sort-window 2 (2 sentences, blank lines among them).
WINDOW_OF_LINE = [0, 0, 0, 1, 1, 2, 2]
TEXT = [
    "The file is open .",
    "",
    "Return the value of the key .",
    "The file is open .",
    "a",
    "   ",
    "the key is the value",
]


BATCH = ("--batch-size", "4")  # the reference's batching


def read(path):
    """(line number -> array, line number -> num_tokens attribute or None, sentence_to_index)."""
    with h5py.File(path, "r") as vectors:
        index = json.loads(vectors["sentence_to_index"][0])
        names = [name for name in vectors if name != "sentence_to_index"]
        arrays = {int(name): vectors[name][()] for name in names}
        counts = {int(name): vectors[name].attrs.get("num_tokens") for name in names}
        return arrays, counts, index


BATCHES_OF_4 = elmo_embed.Batching(4)


def embed(encoder, source, output, layers="all", batching=BATCHES_OF_4, **options):
    elmo_embed.embed_file(encoder, str(source), str(output), layers, batching, **options)
    return read(output)


@pytest.fixture(scope="module")
def encoder(tiny_bilm_archive):
    return load_bilm_encoder(str(tiny_bilm_archive))


@pytest.fixture(scope="module")
def text_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("text") / "input.txt"
    path.write_text("\n".join(TEXT) + "\n", encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def unpooled(encoder, text_file, tmp_path_factory):
    """Every layer of every line, float32, no pooling: the reference (on one thread, as every
    test runs: module fixtures are made before the function-scoped `one_torch_thread`)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return embed(encoder, text_file, tmp_path_factory.mktemp("ref") / "all.hdf5")
    finally:
        torch.set_num_threads(threads)


def selected(layers_of_line, layers):
    return {
        "all": layers_of_line,
        "average": layers_of_line.mean(axis=0),
        "top": layers_of_line[-1],
    }[layers]


@pytest.mark.parametrize("layers", ["all", "average", "top"])
@pytest.mark.parametrize("pool", ["mean", "max"])
def test_pooled_vectors_equal_numpy_over_the_unpooled_rows_and_empty_lines_pool_to_zeros(
    encoder, text_file, unpooled, tmp_path, layers, pool
):
    reference, _, reference_index = unpooled
    pooled, counts, index = embed(
        encoder,
        text_file,
        tmp_path / "pooled.hdf5",
        layers,
        output_format=elmo_embed.OutputFormat(pool=pool),
    )
    assert index == reference_index
    numpy_pool = {"mean": numpy.mean, "max": numpy.max}[pool]
    for line, text in enumerate(TEXT):
        rows = selected(reference[line], layers)  # (..., tokens, dim)
        assert counts[line] == len(text.split())
        assert pooled[line].shape == rows.shape[:-2] + rows.shape[-1:]
        if text.split():
            numpy.testing.assert_allclose(pooled[line], numpy_pool(rows, axis=-2), atol=1e-6)
        else:
            assert not pooled[line].any()  # an empty line: zeros, num_tokens 0


def test_pooling_through_the_cli_with_every_layer(
    tiny_bilm_archive, text_file, unpooled, plugin_cwd
):
    run_allennlp_in_process(
        ["elmo-embed", str(tiny_bilm_archive), str(text_file), "max.hdf5", "--pool", "max"],
        cwd=plugin_cwd,
    )
    pooled, counts, _ = read(plugin_cwd / "max.hdf5")
    for line, rows in unpooled[0].items():
        assert pooled[line].shape == (3, 32) and counts[line] == rows.shape[1]
        expected = rows.max(axis=1) if rows.shape[1] else numpy.zeros((3, 32))
        numpy.testing.assert_allclose(pooled[line], expected, atol=1e-6)


@pytest.mark.parametrize("compression", ["none", "gzip", "lzf"])
def test_float16_equals_float32_rounded_and_compression_changes_no_value(
    encoder, text_file, unpooled, tmp_path, compression
):
    reference, _, reference_index = unpooled
    form = elmo_embed.OutputFormat(dtype="float16", compression=compression)
    half, _, index = embed(encoder, text_file, tmp_path / "half.hdf5", output_format=form)
    assert index == reference_index and sorted(half) == sorted(reference)
    for line, value in reference.items():
        assert half[line].dtype == numpy.float16
        numpy.testing.assert_array_equal(half[line], value.astype(numpy.float16))
    with h5py.File(tmp_path / "half.hdf5", "r") as output:
        expected = None if compression == "none" else compression
        assert output["0"].compression == expected


def test_float32_compressed_files_hold_the_same_bits(encoder, text_file, unpooled, tmp_path):
    form = elmo_embed.OutputFormat(compression="gzip")
    packed, _, _ = embed(encoder, text_file, tmp_path / "gz.hdf5", output_format=form)
    for line, value in unpooled[0].items():
        numpy.testing.assert_array_equal(packed[line], value)


def tagger_scalar_mix(archive) -> ScalarMix:
    mixes = [m for m in load_archive(str(archive)).model.modules() if isinstance(m, ScalarMix)]
    assert len(mixes) == 1
    return mixes[0]


def test_learned_mix_equals_the_taggers_own_scalar_mix_on_the_unpooled_layers(
    tiny_bilm_archive, tiny_elmo_tagger_archive, text_file, unpooled, plugin_cwd
):
    run_allennlp_in_process(
        [
            "elmo-embed",
            str(tiny_bilm_archive),
            str(text_file),
            "mix.hdf5",
            "--layers",
            f"mix:{tiny_elmo_tagger_archive}",
        ],
        cwd=plugin_cwd,
    )
    mixed, _, index = read(plugin_cwd / "mix.hdf5")
    assert index == unpooled[2]
    scalar_mix = tagger_scalar_mix(tiny_elmo_tagger_archive)
    weights = torch.softmax(torch.cat(list(scalar_mix.scalar_parameters)), dim=0)
    assert not torch.allclose(weights, torch.full((3,), 1 / 3), atol=1e-3)  # learned, not uniform
    for line, layers in unpooled[0].items():
        with torch.no_grad():
            theirs = scalar_mix(list(torch.from_numpy(layers)))
        assert mixed[line].shape == (layers.shape[1], 32)
        numpy.testing.assert_allclose(mixed[line], theirs.numpy(), atol=1e-6)


def test_learned_mix_pooled_is_the_mean_of_the_mix(
    encoder, tiny_elmo_tagger_archive, text_file, tmp_path
):
    layers = f"mix:{tiny_elmo_tagger_archive}"
    mixed, _, _ = embed(encoder, text_file, tmp_path / "mix.hdf5", layers)
    form = elmo_embed.OutputFormat(pool="mean")
    pooled, _, _ = embed(encoder, text_file, tmp_path / "pooled.hdf5", layers, output_format=form)
    for line, rows in mixed.items():
        if len(rows):
            numpy.testing.assert_allclose(pooled[line], rows.mean(axis=0), atol=1e-6)


def fake_downstream(folder, state, config=None):
    """A serialization folder with config.json and best.th holding `state`."""
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(config or {"model": {"type": "x"}}))
    torch.save(state, folder / "best.th")
    return folder


def test_a_mix_archive_with_no_mix_several_or_another_biLM_is_a_one_line_error(
    encoder, tiny_bilm_archive, tmp_path
):
    with pytest.raises(ConfigurationError, match=r"exactly one ELMo layer mix .*found 0: none"):
        read_learned_mix(str(tiny_bilm_archive))
    s = {f"scalar_parameters.{i}": torch.tensor([0.1 * i]) for i in range(3)}
    two = {**{f"a.{k}": v for k, v in s.items()}, **{f"b.{k}": v for k, v in s.items()}}
    two.update({"a.gamma": torch.tensor([1.0]), "b.gamma": torch.tensor([2.0])})
    with pytest.raises(ConfigurationError, match=r"found 2: a \(3 layers\), b \(3 layers\)"):
        read_learned_mix(str(fake_downstream(tmp_path / "two", two)))
    four = {f"e.scalar_parameters.{i}": torch.tensor([0.0]) for i in range(4)}
    four["e.gamma"] = torch.tensor([1.0])
    mix = read_learned_mix(str(fake_downstream(tmp_path / "four", four)))
    with pytest.raises(ConfigurationError, match="has 4 layers; MODEL has 3"):
        mix.check_fits(encoder, "MODEL")
    key, value = next(iter(encoder.state_dict().items()))
    wide = {f"e.scalar_mix.{k}": v for k, v in s.items()}  # the embedder e's mix and biLM
    wide["e.scalar_mix.gamma"] = torch.tensor([1.0])
    wide[f"e.bilm.{key}"] = torch.zeros(value.numel() + 1)
    mix = read_learned_mix(str(fake_downstream(tmp_path / "wide", wide)))
    with pytest.raises(ConfigurationError, match=f"another biLM: its {key} has shape"):
        mix.check_fits(encoder, "MODEL")
    normed = {f"e.{k}": v for k, v in s.items()}
    normed["e.gamma"] = torch.tensor([1.0])
    config = {"model": {"embedder": {"type": "elmo_bilm_embedder", "do_layer_norm": True}}}
    with pytest.raises(ConfigurationError, match="uses do_layer_norm"):
        read_learned_mix(str(fake_downstream(tmp_path / "normed", normed, config)))
    broken = fake_downstream(tmp_path / "broken", normed)
    (broken / "config.json").write_text('{"model": ')
    with pytest.raises(
        ConfigurationError, match=rf"^elmo-embed: --layers mix: {broken}: unreadable config.json \("
    ):
        read_learned_mix(str(broken))
    mix = read_learned_mix(str(fake_downstream(tmp_path / "fine", normed)))
    assert mix.weights == pytest.approx(torch.softmax(torch.tensor([0.0, 0.1, 0.2]), 0).tolist())


def union(shards):
    """The shards' datasets and merged sentence_to_index; an error if two hold the same line."""
    arrays, index = {}, {}
    for shard_arrays, _, shard_index in shards:
        assert not set(arrays) & set(shard_arrays)
        arrays.update(shard_arrays)
        for text, lines in shard_index.items():
            index[text] = sorted(index.get(text, []) + lines)
    return arrays, index


@pytest.mark.parametrize("parts", [1, 2, 3, 9])
def test_shards_union_equals_the_unsharded_file_key_for_key(
    encoder, text_file, unpooled, tmp_path, parts
):
    """Keys, values (bit for bit) and sentence_to_index are equal: a shard takes whole sort
    windows (here of 2 sentences: lines 0-2, 3-4, 5-6), batched as in the unsharded run. 9
    shards of 3 windows: shards 3 to 8 get no line (a file with only sentence_to_index)."""
    windows = elmo_embed.Batching(4, sort_window=2)
    whole = embed(encoder, text_file, tmp_path / "whole.hdf5", batching=windows)
    shards = [
        embed(
            encoder,
            text_file,
            tmp_path / f"{part}.hdf5",
            batching=windows,
            shard=Shard(part, parts, block=2),
        )
        for part in range(parts)
    ]
    for part, (arrays, _, _) in enumerate(shards):
        assert sorted(arrays) == [line for line in range(7) if WINDOW_OF_LINE[line] % parts == part]
    arrays, index = union(shards)
    assert index == whole[2] == unpooled[2] and sorted(arrays) == sorted(whole[0])
    for line, value in whole[0].items():
        assert arrays[line].dtype == value.dtype
        numpy.testing.assert_array_equal(arrays[line], value)


@pytest.mark.parametrize("value", ["2/2", "1", "a/b", "-1/2", "1/0", "0/2/3", ""])
def test_a_malformed_shard_is_an_error_naming_it_and_the_form(value):
    with pytest.raises(ConfigurationError, match=f"I/N with 0 <= I < N .*got {value!r}"):
        parse_shard(value)


def standard_input_run(archive, cwd, data: bytes, *options):
    """`allennlp elmo-embed ARCHIVE - OPTIONS` (a process of its own) with `data` on its standard
    input."""
    args = ["elmo-embed", str(archive), "-", *options]
    return run_allennlp(args, cwd=cwd, check=False, stdin=data)


def test_standard_input_and_compressed_files_equal_the_plain_file(
    tiny_bilm_archive, text_file, unpooled, plugin_cwd
):
    """Same batching as the reference (`--batch-size 4`): bit for bit; a shard of standard
    input: its keys, values within float32 rounding."""
    data = text_file.read_bytes()
    outputs = {
        "stdin": standard_input_run(tiny_bilm_archive, plugin_cwd, data, "stdin.hdf5", *BATCH)
    }
    assert outputs["stdin"].returncode == 0, outputs["stdin"].stderr[-3000:]
    for suffix, compress in (
        (".gz", gzip.compress),
        (".bz2", bz2.compress),
        (".xz", lzma.compress),
    ):
        (plugin_cwd / f"in.txt{suffix}").write_bytes(compress(data))
        args = ["elmo-embed", str(tiny_bilm_archive), f"in.txt{suffix}", f"{suffix}.hdf5", *BATCH]
        run_allennlp_in_process(args, cwd=plugin_cwd)
    for name in ("stdin", ".gz", ".bz2", ".xz"):
        arrays, _, index = read(plugin_cwd / f"{name}.hdf5")
        assert index == unpooled[2] and sorted(arrays) == sorted(unpooled[0])
        for line, value in unpooled[0].items():
            numpy.testing.assert_array_equal(arrays[line], value)
    sharded = standard_input_run(
        tiny_bilm_archive, plugin_cwd, data, "s.hdf5", "--shard", "1/2", "--sort-window", "2"
    )
    assert sharded.returncode == 0
    arrays, _, index = read(plugin_cwd / "s.hdf5")
    assert sorted(arrays) == [3, 4] and index == {TEXT[3]: [3], TEXT[4]: [4]}
    for line in arrays:
        numpy.testing.assert_allclose(arrays[line], unpooled[0][line], atol=1e-5, rtol=0)


def refused(result, *named):
    output = result.stdout + result.stderr
    output = output if isinstance(output, str) else output.decode()
    assert result.returncode != 0 and "Traceback" not in output, output[-3000:]
    errors = [line for line in output.splitlines() if ": error: " in line]
    assert len(errors) == 1 and all(name in errors[0] for name in named), (errors, named)


def test_bad_input_and_options_are_one_line_errors_and_write_nothing(
    tiny_bilm_archive, text_file, plugin_cwd
):
    numpy.random.seed(0)
    (plugin_cwd / "random.bin").write_bytes(numpy.random.bytes(300_000))
    args = ["elmo-embed", str(tiny_bilm_archive)]

    def cli(*options):
        return run_allennlp([*args, *options], cwd=plugin_cwd, check=False)

    before = set(os.listdir(plugin_cwd))
    refused(cli("random.bin", "o.hdf5"), "random.bin is not text")
    refused(
        standard_input_run(tiny_bilm_archive, plugin_cwd, b"\x00\xff" * 500, "o.hdf5"),
        "standard input is not text",
    )
    refused(cli(str(text_file), "o.hdf5", "--shard", "3/3"), "'3/3'", "I/N")
    refused(cli(str(text_file), "o.hdf5", "--pool", "median"), "--pool", "'median'")
    refused(cli(str(text_file), "o.hdf5", "--dtype", "int8"), "--dtype", "'int8'")
    refused(cli(str(text_file), "o.hdf5", "--compression", "zstd"), "--compression")
    refused(cli(str(text_file), "o.hdf5", "--layers", "middle"), "--layers", "'middle'")
    refused(cli(str(text_file), "o.hdf5", "--layers", f"mix:{text_file}"), str(text_file))
    refused(cli(str(text_file), "o.hdf5", "--layers", "mix:nope.tar.gz"), "nope.tar.gz")
    refused(
        standard_input_run(tiny_bilm_archive, plugin_cwd, b"a b\n", "o.hdf5", "--resume"),
        "--resume needs an input file, not standard input",
    )
    assert set(os.listdir(plugin_cwd)) == before


@pytest.mark.parametrize(
    "change, setting",
    [
        ({"layers": "top"}, "layers"),
        ({"output_format": elmo_embed.OutputFormat(pool="mean")}, "pool"),
        ({"output_format": elmo_embed.OutputFormat(dtype="float16")}, "dtype"),
        ({"output_format": elmo_embed.OutputFormat(compression="lzf")}, "compression"),
        ({"shard": Shard(0, 2)}, "shard"),
        (
            {"batching": elmo_embed.Batching(batch_size=2, sort_window=2, token_cache=0)},
            "token-cache",
        ),
    ],
    ids=lambda value: value if isinstance(value, str) else "",
)
def test_resume_refuses_a_partial_file_made_with_other_options(
    encoder, text_file, tmp_path, monkeypatch, change, setting
):
    """(--token-cache: the cached path's vectors differ from the other's in the last bits.)"""
    output = str(tmp_path / "out.hdf5")
    batching = elmo_embed.Batching(batch_size=2, sort_window=2)

    def interrupted(*args):
        raise KeyboardInterrupt

    monkeypatch.setattr(elmo_embed, "embed_chunk", interrupted)
    with pytest.raises(KeyboardInterrupt):
        elmo_embed.embed_file(encoder, str(text_file), output, "all", batching)
    assert os.path.isfile(output + elmo_embed.PARTIAL_SUFFIX)
    options = {"layers": "all", "batching": batching, **change}
    with pytest.raises(ConfigurationError, match=f"was written with --{setting} "):
        elmo_embed.embed_file(encoder, str(text_file), output, resume=True, **options)


def test_a_killed_shard_resumes_to_the_same_datasets_bit_for_bit(tiny_bilm_archive, plugin_cwd):
    """Shard 1/2 with float16, gzip and mean pooling is killed (SIGKILL) after two recorded
    windows; `--resume` ends with exactly the uninterrupted shard's datasets, attributes and
    sentence_to_index."""
    input_file = many_lines(plugin_cwd, 1000)
    options = ["--shard", "1/2", "--pool", "mean", "--dtype", "float16", "--compression", "gzip"]
    options += ["--batch-size", "2", "--sort-window", "32"]
    args = ["elmo-embed", str(tiny_bilm_archive), str(input_file)]
    run_allennlp_in_process([*args, "whole.hdf5", *options], cwd=plugin_cwd)
    log = killed_after_two_records([*args, "resumed.hdf5", *options], plugin_cwd)
    resumed = run_allennlp_in_process([*args, "resumed.hdf5", *options, "--resume"], cwd=plugin_cwd)
    assert lines_done_records(resumed.stderr)[0] > lines_done_records(log)[-1]
    whole, whole_counts, whole_index = read(plugin_cwd / "whole.hdf5")
    again, again_counts, again_index = read(plugin_cwd / "resumed.hdf5")
    assert again_index == whole_index and again_counts == whole_counts
    owned = Shard(1, 2, block=32).owned(input_file.read_bytes().splitlines())
    assert sorted(again) == sorted(whole) == [line for line, _ in owned]
    for line, value in whole.items():
        assert again[line].dtype == numpy.float16
        numpy.testing.assert_array_equal(again[line], value)


def docs_python_blocks():
    text = (REPO_ROOT / "docs" / "embedding-options.md").read_text(encoding="utf-8")
    return grab_code_blocks(text, lang="python")


def test_the_docs_merge_snippet_reads_three_shards_as_the_unsharded_file(
    encoder, text_file, unpooled, tmp_path, monkeypatch
):
    (tmp_path / "out").mkdir()
    for part in range(3):
        embed(
            encoder,
            text_file,
            tmp_path / "out" / f"vectors.{part}.hdf5",
            batching=elmo_embed.Batching(4, sort_window=2),
            shard=Shard(part, 3, block=2),
        )
    reading, merging = docs_python_blocks()
    monkeypatch.chdir(tmp_path)
    exec(merging, {})
    arrays, _, index = read(tmp_path / "vectors.hdf5")
    assert index == unpooled[2] and sorted(arrays) == sorted(unpooled[0])
    for line, value in unpooled[0].items():
        numpy.testing.assert_allclose(arrays[line], value, atol=1e-5, rtol=0)
    names: dict = {}
    exec(reading, names)
    assert names["lines"] == list(range(len(TEXT))) and names["first_of"][""] == 1
