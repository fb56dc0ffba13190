"""`elmo_embeddings`' `pool` through `allennlp predict` (numpy over its own unpooled output), and
our predictors' one-line errors for JSON lines that are not JSON or hold no sentence."""

import numpy
import pytest
from allennlp.common.checks import ConfigurationError
from allennlp.models.archival import load_archive
from allennlp.predictors import Predictor

from elmo_plugin.predictors.json_input import json_line
from tests.helpers import predict, predict_args, run_allennlp

SENTENCES = [{"sentence": "The file is open ."}, {"tokens": ["a"]}, {"sentence": "  "}]
MIX = {"scalar_mix_parameters": [1.0, 2.0, -1.0], "gamma": 0.5}


@pytest.mark.parametrize("pool", ["mean", "max"])
def test_pooled_outputs_equal_numpy_over_the_unpooled_tokens(tiny_bilm_archive, plugin_cwd, pool):
    unpooled = predict(tiny_bilm_archive, plugin_cwd, SENTENCES, "elmo_embeddings", **MIX)
    pooled = predict(tiny_bilm_archive, plugin_cwd, SENTENCES, "elmo_embeddings", pool=pool, **MIX)
    numpy_pool = {"mean": numpy.mean, "max": numpy.max}[pool]
    for full, short in zip(unpooled, pooled, strict=True):
        n = len(full["tokens"])
        assert short["tokens"] == full["tokens"] and short["num_tokens"] == n
        for key, axis in (("layers", 1), ("average", 0), ("mix", 0)):
            rows = numpy.array(full[key])
            if n:
                numpy.testing.assert_allclose(short[key], numpy_pool(rows, axis=axis), atol=1e-6)
            else:  # an empty sentence pools to zeros
                assert not numpy.any(short[key])
        assert numpy.array(short["layers"]).shape == (3, 32)
        assert numpy.array(short["average"]).shape == numpy.array(short["mix"]).shape == (32,)


def test_an_unknown_pool_is_an_error_naming_it(tiny_bilm_archive):
    archive = load_archive(str(tiny_bilm_archive))
    with pytest.raises(ConfigurationError, match="pool must be one of .* got 'median'"):
        Predictor.from_archive(archive, "elmo_embeddings", extra_args={"pool": "median"})


@pytest.mark.parametrize(
    "line, message",
    [
        ('{"sentence": "a b" oops', "not JSON (Expecting ',' delimiter at column 20)"),
        ('["a", "b"]', "not a JSON object but list"),
        (
            '{"text": "a b"}',
            """expected {"sentence": "..."} or {"tokens": [...]}, got keys ['text']""",
        ),
        ('{"tokens": "a b"}', """"tokens" must be a list of strings, got 'a b'"""),
    ],
)
def test_a_bad_json_line_is_a_one_line_error_quoting_it(line, message):
    with pytest.raises(ConfigurationError) as error:
        json_line(line + "\n")
    assert str(error.value) == f"input line {line!r}: {message}"


def test_a_long_bad_line_is_quoted_by_its_start():
    with pytest.raises(ConfigurationError, match=r"^input line '\{\"sentence\": \"x{46}'\.\.\.: "):
        json_line('{"sentence": "' + "x" * 100)


@pytest.mark.parametrize("predictor", ["elmo_embeddings", "elmo_lm_scorer", "whitespace_tagger"])
def test_allennlp_predict_ends_with_the_bad_line_not_a_json_traceback(
    tiny_bilm_archive, tiny_elmo_tagger_archive, plugin_cwd, predictor
):
    archive = tiny_elmo_tagger_archive if predictor == "whitespace_tagger" else tiny_bilm_archive
    inputs = '{"sentence": "a b"}\n\n{"sentence": "c d"\n'
    args = predict_args(archive, plugin_cwd, inputs, predictor)
    result = run_allennlp(args, cwd=plugin_cwd, check=False)  # the process's exit and stderr
    assert result.returncode == 1 and "Traceback" not in result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert last == (
        "allennlp predict: error: in.jsonl:3: "
        """input line '{"sentence": "c d"': not JSON (Expecting ',' delimiter at column 19)"""
    )


def test_allennlp_predict_stopped_by_a_bad_line_leaves_the_output_file_as_it_was(
    tiny_bilm_archive, plugin_cwd
):
    inputs = '{"sentence": "a b"}\n\n{"sentence": "c d"}\n{"words": "e"}\n'
    args = predict_args(tiny_bilm_archive, plugin_cwd, inputs, "elmo_embeddings")
    args[args.index("--batch-size") + 1] = "1"  # lines 1 and 3 predicted and written first
    (plugin_cwd / "out.jsonl").write_text("an earlier output\n")
    result = run_allennlp(args, cwd=plugin_cwd, check=False)
    assert result.returncode == 1
    assert result.stderr.strip().splitlines()[-1] == (
        'allennlp predict: error: in.jsonl:4: input line \'{"words": "e"}\': '
        """expected {"sentence": "..."} or {"tokens": [...]}, got keys ['words']"""
    )
    assert (plugin_cwd / "out.jsonl").read_text() == "an earlier output\n"
    assert sorted(path.name for path in plugin_cwd.iterdir()) == [
        ".allennlp_plugins",
        "in.jsonl",
        "out.jsonl",
    ]
