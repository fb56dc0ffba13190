"""`allennlp elmo-embed` through the CLI (in this process; the killed run in a process of its own),
from a working directory outside the repo."""

import functools
import http.server
import json
import os
import threading

import h5py
import numpy
import pytest
import torch
from allennlp.common import file_utils as allennlp_file_utils
from allennlp.common.checks import ConfigurationError

from elmo_plugin.archives.bilm_source import load_bilm_encoder
from elmo_plugin.commands import elmo_embed
from elmo_plugin.data.elmo_char_ids_indexer import ElmoCharIdsIndexer
from elmo_plugin.data.elmo_vocab_file import BOS, EOS
from elmo_plugin.modules.bilm_sentence_layers import sentence_layers
from elmo_plugin.modules.elmo_char_cnn import ElmoCharCnn
from elmo_plugin.modules.token_vector_cache import TokenVectorCache
from tests.elmo_files.elmo_reference import random_encoder, write_pair
from tests.helpers import (
    killed_after_two_records,
    lines_done_records,
    many_lines,
    predict,
    run_allennlp_in_process,
)

LONG_TOKEN = "x" * 70  # longer than ELMo's 50 characters: truncated, not fatal
LINES = [
    b"The file is open .",
    b"",
    b"Return the value of the key .",
    b"The file is open .",
    b"   ",
    "caf\u00e9 ".encode() + b"caf\xc3 " + LONG_TOKEN.encode(),  # one invalid UTF-8 byte
    b"a",
]
TEXTS = [
    "The file is open .",
    "",
    "Return the value of the key .",
    "The file is open .",
    "",
    "caf\u00e9 caf\ufffd " + LONG_TOKEN,
    "a",
]


def embed(archive, input_file, output, cwd, *options):
    run_allennlp_in_process(
        ["elmo-embed", str(archive), str(input_file), str(output), *options], cwd=cwd
    )
    return read_hdf5(output)


def read_hdf5(path):
    with h5py.File(path, "r") as vectors:
        index = json.loads(vectors["sentence_to_index"][0])
        return {name: vectors[name][()] for name in vectors if name != "sentence_to_index"}, index


@pytest.fixture(scope="module")
def embedded(tiny_bilm_archive, tmp_path_factory):
    """(cwd, input file, every layer of every line, sentence_to_index) from one CLI run."""
    cwd = tmp_path_factory.mktemp("embed")
    (cwd / ".allennlp_plugins").write_text("elmo_plugin\n")
    input_file = cwd / "input.txt"
    input_file.write_bytes(b"\n".join(LINES))  # no newline after the last line
    (cwd / "out").mkdir()
    vectors, index = embed(
        tiny_bilm_archive, input_file, cwd / "out" / "all.hdf5", cwd, "--batch-size", "2"
    )
    return cwd, input_file, vectors, index


def test_layers_shapes_and_sentence_to_index_with_blank_and_duplicate_lines(embedded):
    _, _, vectors, index = embedded
    assert sorted(vectors, key=int) == [str(i) for i in range(len(LINES))]
    assert index == {TEXTS[0]: [0, 3], "": [1, 4], TEXTS[2]: [2], TEXTS[5]: [5], "a": [6]}
    for line, text in enumerate(TEXTS):
        # char CNN + 2 LSTM layers, 2 x 16
        assert vectors[str(line)].shape == (3, len(text.split()), 32)
        assert vectors[str(line)].dtype == numpy.float32
    # Layer 0 is the character CNN output repeated to full width; the others differ per half.
    numpy.testing.assert_array_equal(vectors["2"][0, :, :16], vectors["2"][0, :, 16:])
    assert not numpy.allclose(vectors["2"][1, :, :16], vectors["2"][1, :, 16:])
    # Every sentence from zero state: duplicate lines get identical vectors; context matters.
    numpy.testing.assert_allclose(vectors["0"], vectors["3"], atol=1e-6)
    assert not numpy.allclose(vectors["0"][2, 1], vectors["2"][2, 4])  # "file" vs "the" in context
    assert numpy.abs(vectors["2"]).sum(axis=-1).min() > 0  # no padding left inside a sentence


def test_average_and_top_layers(embedded, tiny_bilm_archive, tmp_path):
    cwd, input_file, every, _ = embedded
    average, _ = embed(
        tiny_bilm_archive, input_file, tmp_path / "avg.hdf5", cwd, "--layers", "average"
    )
    elmo_embed.embed_file(
        load_bilm_encoder(str(tiny_bilm_archive)),
        str(input_file),
        str(tmp_path / "top.hdf5"),
        "top",
    )
    top, _ = read_hdf5(tmp_path / "top.hdf5")
    for line, text in enumerate(TEXTS):
        name = str(line)
        assert average[name].shape == top[name].shape == (len(text.split()), 32)
        numpy.testing.assert_allclose(average[name], every[name].mean(axis=0), atol=1e-6)
        numpy.testing.assert_allclose(top[name], every[name][-1], atol=1e-6)


def test_equals_elmo_embeddings_predictor_and_its_scalar_mix(embedded, tiny_bilm_archive, tmp_path):
    _, _, vectors, _ = embedded
    sentences = [(line, text) for line, text in enumerate(TEXTS) if text]
    inputs = [
        {"sentence": text} if line % 2 else {"tokens": text.split()} for line, text in sentences
    ]
    mix = {"scalar_mix_parameters": [1.0, 2.0, -1.0], "gamma": 0.5}
    predicted = predict(tiny_bilm_archive, tmp_path, inputs, "elmo_embeddings", **mix)
    assert len(predicted) == len(sentences)
    weights = numpy.exp([1.0, 2.0, -1.0]) / numpy.exp([1.0, 2.0, -1.0]).sum()
    for (line, text), output in zip(sentences, predicted, strict=False):
        assert output["tokens"] == text.split()
        layers = vectors[str(line)]
        numpy.testing.assert_allclose(numpy.array(output["layers"]), layers, atol=1e-5)
        numpy.testing.assert_allclose(
            numpy.array(output["average"]), layers.mean(axis=0), atol=1e-5
        )
        numpy.testing.assert_allclose(
            numpy.array(output["mix"]), 0.5 * numpy.einsum("l,ltd->td", weights, layers), atol=1e-5
        )


@pytest.mark.parametrize(
    "batching",
    [
        elmo_embed.Batching(batch_size=64),
        elmo_embed.Batching(batch_size=2, sort_window=2),
        elmo_embed.Batching(batch_size=64, batch_tokens=12, sort_window=5, token_cache=3),
        elmo_embed.Batching(batch_size=1, batch_tokens=1, sort_window=1, token_cache=0),
    ],
)
def test_token_batches_sort_windows_and_token_cache_give_each_sentence_alone_vectors(
    tiny_bilm_archive, tmp_path, batching
):
    """Batching by tokens, sorting by length within windows and the bounded token cache change
    no vector and no line's place: every line's vectors equal `sentence_layers` on that sentence
    alone (no padding, no cache); sentence_to_index lists lines in file order."""
    lines = tmp_path / "input.txt"
    corpus = [
        " ".join(["the", "file", "is", "open", LONG_TOKEN][: 1 + i % 5] + ["."] * (i % 3))
        for i in range(23)
    ]
    corpus[7] = ""
    lines.write_text("\n".join(corpus) + "\n", encoding="utf-8")
    encoder = load_bilm_encoder(str(tiny_bilm_archive))
    elmo_embed.embed_file(encoder, str(lines), str(tmp_path / "out.hdf5"), "all", batching)
    vectors, index = read_hdf5(tmp_path / "out.hdf5")
    assert sorted(vectors, key=int) == [str(i) for i in range(23)]
    assert index["the"] == [0, 15] and index[""] == [7]
    indexer = ElmoCharIdsIndexer()
    for line, text in enumerate(corpus):
        if not text:
            assert vectors[str(line)].shape == (3, 0, 32)
            continue
        ids = torch.tensor([[indexer.char_ids(token) for token in [BOS, *text.split(), EOS]]])
        with torch.no_grad():
            alone, _ = sentence_layers(encoder, ids)
        numpy.testing.assert_allclose(vectors[str(line)], alone[0].numpy(), atol=1e-5)


def test_token_cache_is_bounded_and_equals_the_character_encoder():
    torch.manual_seed(0)
    cnn = ElmoCharCnn(filters=[[1, 4], [2, 6]], num_highway=1, projection_dim=5).eval()
    indexer = ElmoCharIdsIndexer()
    cache = TokenVectorCache(cnn, indexer.char_ids, max_tokens=2)
    texts = ["a", "bb", "a", "ccc", "bb", "a", LONG_TOKEN]
    with torch.no_grad():
        got = cache.vectors(texts)
        want = cnn(torch.tensor([[indexer.char_ids(text) for text in texts]]))[0]
        torch.testing.assert_close(got, want, atol=1e-6, rtol=0)
        torch.testing.assert_close(
            cache.vectors(["ccc", "a", "zz"]),
            cnn(torch.tensor([[indexer.char_ids(t) for t in ["ccc", "a", "zz"]]]))[0],
            atol=1e-6,
            rtol=0,
        )
    assert len(cache._vectors) == 2 and list(cache._vectors) == ["a", "zz"]  # most recently used
    assert (cache.hits, cache.misses) == (1, 6)  # "ccc" was kept from the first call


def test_elmo_files_folder_gives_the_archive_vectors(embedded, tiny_bilm_archive, tmp_path):
    cwd, input_file, from_archive, _ = embedded
    run_allennlp_in_process(
        ["elmo-export", str(tiny_bilm_archive), str(tmp_path / "elmo_files")], cwd=cwd
    )
    from_files, index = embed(tmp_path / "elmo_files", input_file, tmp_path / "f.hdf5", cwd)
    assert index[TEXTS[0]] == [0, 3]
    for name, value in from_archive.items():
        numpy.testing.assert_allclose(from_files[name], value, atol=1e-5)


def test_an_archive_url_is_downloaded_once_into_allennlps_cache_and_gives_the_files_vectors(
    embedded, tiny_bilm_archive, tmp_path, monkeypatch
):
    """Served over HTTP from this process; a missing URL or file is one line naming it."""
    cwd, input_file, from_file, _ = embedded
    cache = tmp_path / "cache"
    monkeypatch.setattr(allennlp_file_utils, "CACHE_DIRECTORY", str(cache))
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    handler = functools.partial(
        http.server.SimpleHTTPRequestHandler, directory=str(tiny_bilm_archive.parent)
    )
    handler.log_message = lambda *args: None  # type: ignore[attr-defined]
    with http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler) as server:
        threading.Thread(target=server.serve_forever, daemon=True).start()
        url = f"http://127.0.0.1:{server.server_address[1]}/"
        for output in ("u1.hdf5", "u2.hdf5"):
            from_url, index = embed(  # the file's batches: the same sums, the same vectors
                url + tiny_bilm_archive.name,
                input_file,
                tmp_path / output,
                cwd,
                "--batch-size",
                "2",
            )
            assert index[TEXTS[0]] == [0, 3] and sorted(from_url) == sorted(from_file)
            for name, value in from_file.items():
                numpy.testing.assert_array_equal(from_url[name], value)
        for model in (url + "nope.tar.gz", "nope.tar.gz"):
            missing = run_allennlp_in_process(
                ["elmo-embed", model, str(input_file), str(tmp_path / "m.hdf5")],
                cwd=cwd,
                check=False,
            )
            assert missing.returncode == 1 and "Traceback" not in missing.stderr
            last = missing.stderr.strip().splitlines()[-1]
            assert last == f"allennlp elmo-embed: error: model not found: {model}"
        server.shutdown()
    downloaded = [path for path in cache.iterdir() if not path.name.endswith((".json", ".lock"))]
    assert len(downloaded) == 1 and downloaded[0].read_bytes() == tiny_bilm_archive.read_bytes()
    assert not (tmp_path / "m.hdf5").exists()


def test_a_folder_named_as_the_published_downloads_embeds_its_encoders_layers(plugin_cwd):
    """elmo-embed takes any one *options.json + *weights.hdf5 (here named as the published
    files): every layer equals the encoder's own, sentence by sentence."""
    folder = plugin_cwd / "elmo"
    encoder = random_encoder(3.0)
    options, weights = write_pair(encoder, folder)
    os.rename(options, folder / "elmo_2x16_24_cnn_1xhighway_options.json")
    os.rename(weights, folder / "elmo_2x16_24_cnn_1xhighway_weights.hdf5")
    (plugin_cwd / "in.txt").write_text("The file is open .\na\n")
    vectors, _ = embed(folder, "in.txt", plugin_cwd / "out.hdf5", plugin_cwd)
    indexer = ElmoCharIdsIndexer()
    for index, line in enumerate(["The file is open .", "a"]):
        tokens = [BOS, *line.split(), EOS]
        char_ids = torch.tensor([[indexer.char_ids(token) for token in tokens]])
        with torch.no_grad():
            layers, _ = sentence_layers(encoder, char_ids)
        numpy.testing.assert_allclose(vectors[str(index)], layers[0].numpy(), atol=1e-6)


def test_missing_input_is_an_error_naming_it(tiny_bilm_archive, tmp_path):
    with pytest.raises(ConfigurationError, match="nope.txt"):
        elmo_embed.embed_file(
            load_bilm_encoder(str(tiny_bilm_archive)),
            str(tmp_path / "nope.txt"),
            str(tmp_path / "o.hdf5"),
        )


@pytest.mark.slow
def test_resume_after_a_real_kill_gives_the_uninterrupted_file(tiny_bilm_archive, plugin_cwd):
    """`allennlp elmo-embed` is killed (SIGKILL) after it has recorded two chunks as done; the
    output does not exist, only OUTPUT.partial; `--resume` skips the recorded lines and ends with
    exactly the datasets and sentence_to_index of an uninterrupted run."""
    input_file = many_lines(plugin_cwd, 1000)
    args = ["elmo-embed", str(tiny_bilm_archive), str(input_file)]
    small = ["--batch-size", "2", "--sort-window", "32"]
    run_allennlp_in_process([*args, "whole.hdf5", *small], cwd=plugin_cwd)
    log = killed_after_two_records([*args, "resumed.hdf5", *small], plugin_cwd)
    assert (
        not (plugin_cwd / "resumed.hdf5").exists()
        and (plugin_cwd / "resumed.hdf5.partial").exists()
    )
    resumed = run_allennlp_in_process([*args, "resumed.hdf5", *small, "--resume"], cwd=plugin_cwd)
    # recorded lines were skipped
    assert lines_done_records(resumed.stderr)[0] > lines_done_records(log)[-1]
    assert not (plugin_cwd / "resumed.hdf5.partial").exists()
    whole, whole_index = read_hdf5(plugin_cwd / "whole.hdf5")
    again, again_index = read_hdf5(plugin_cwd / "resumed.hdf5")
    assert again_index == whole_index and sorted(again) == sorted(whole) and len(whole) == 1000
    for name, value in whole.items():
        numpy.testing.assert_array_equal(again[name], value)
    with h5py.File(plugin_cwd / "resumed.hdf5", "r") as done:
        assert dict(done.attrs) == {}  # nothing left of the resume record


def test_a_failed_run_leaves_only_the_partial_file_and_resume_refuses_other_options(
    tiny_bilm_archive, tmp_path, monkeypatch
):
    input_file = many_lines(tmp_path, 100)
    encoder = load_bilm_encoder(str(tiny_bilm_archive))
    output = tmp_path / "out.hdf5"
    calls = []

    def fail_on_second_chunk(*args):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        embed_chunk(*args)

    embed_chunk = elmo_embed.embed_chunk
    batching = elmo_embed.Batching(batch_size=4, sort_window=8)
    monkeypatch.setattr(elmo_embed, "embed_chunk", fail_on_second_chunk)
    with pytest.raises(KeyboardInterrupt):
        elmo_embed.embed_file(encoder, str(input_file), str(output), "all", batching)
    assert not output.exists() and (tmp_path / "out.hdf5.partial").exists()
    with pytest.raises(
        ConfigurationError,
        match="out.hdf5.partial was written with --layers 'all', this run has 'top'; rerun with",
    ):
        elmo_embed.embed_file(encoder, str(input_file), str(output), "top", batching, resume=True)
    monkeypatch.setattr(elmo_embed, "embed_chunk", embed_chunk)
    elmo_embed.embed_file(encoder, str(input_file), str(output), "all", batching, resume=True)
    elmo_embed.embed_file(encoder, str(input_file), str(tmp_path / "whole.hdf5"), "all", batching)
    resumed, resumed_index = read_hdf5(output)
    whole, whole_index = read_hdf5(tmp_path / "whole.hdf5")
    assert resumed_index == whole_index and sorted(resumed) == sorted(whole)
    for name, value in whole.items():
        numpy.testing.assert_array_equal(resumed[name], value)
