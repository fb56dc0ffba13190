"""`elmo-continue`'s pieces: the override JSON it resolves, the user's -o on top of it (as
allennlp applies overrides), --freeze as `trainer.no_grad` regexes over the model's names."""

import json
import re
import shlex

import pytest
from allennlp.common import Params
from allennlp.common.checks import ConfigurationError

from elmo_plugin.commands.elmo_continue import (
    DEFAULT_CONFIG,
    config_params,
    continue_overrides,
    freeze_patterns,
    merge_overrides,
    train_command,
)
from tests.elmo_files.elmo_reference import write_pair
from tests.elmo_files.test_elmo_files import TOKENS, tiny_bilm, vocab_of
from tests.helpers import FILTERS_2048, PUBLISHED_SIZES, published_options


def test_user_keys_replace_or_go_into_the_resolved_ones():
    resolved = {
        "vocabulary": {"type": "from_instances", "min_count": {"tokens": 2}},
        "model.contextualizer.cell_size": 24,
        "model.contextualizer.num_layers": 2,
        "train_data_path": "a",
    }
    user = {
        "vocabulary.min_count.tokens": 5,
        "model.contextualizer": {"type": "elmo_lstm"},
        "trainer.num_epochs": 1,
    }
    assert merge_overrides(resolved, user) == {
        "vocabulary": {"type": "from_instances", "min_count": {"tokens": 5}},
        "model.contextualizer": {"type": "elmo_lstm"},
        "train_data_path": "a",
        "trainer.num_epochs": 1,
    }
    assert resolved["vocabulary"]["min_count"]["tokens"] == 2  # not changed in place


def test_freeze_names_the_char_cnn_and_chosen_lstm_layers():
    names = [name for name, _ in tiny_bilm(vocab_of(TOKENS)).named_parameters()]
    patterns = freeze_patterns("char_cnn, lstm.1", "elmo", num_layers=2)
    frozen = [name for name in names if any(re.search(p, name) for p in patterns)]
    assert frozen == [
        name
        for name in names
        if name.startswith("_text_field_embedder.token_embedder_elmo.")
        or re.match(r"_contextualizer\.(forward|backward)_layers\.1\.", name)
    ]
    assert len(frozen) == 15 + 10
    with pytest.raises(ConfigurationError, match="--freeze 'lstm.2' is not one of .*0..1"):
        freeze_patterns("lstm.2", "elmo", num_layers=2)


def test_the_resolved_overrides_build_the_options_architecture(tmp_path):
    """The default config with the resolved overrides is the tiny model's architecture, and the
    printed `allennlp train` command carries the same JSON."""
    write_pair(tiny_bilm(vocab_of(TOKENS)).bilm_encoder(), tmp_path / "elmo")
    (tmp_path / "elmo" / "vocab.txt").write_text("\n".join(TOKENS) + "\n")
    overrides = continue_overrides(
        str(tmp_path / "elmo"), DEFAULT_CONFIG, "train.txt", "valid.txt", freeze="char_cnn"
    )
    config = Params.from_file(DEFAULT_CONFIG, json.dumps(overrides)).as_dict()
    contextualizer = config["model"]["contextualizer"]
    assert (contextualizer["input_dim"], contextualizer["cell_size"]) == (16, 24)
    assert config["model"]["text_field_embedder"]["token_embedders"]["elmo"]["num_highway"] == 2
    assert config["vocabulary"] == {
        "type": "elmo_tokens_file",
        "tokens_file": str(tmp_path / "elmo" / "vocab.txt"),
    }
    assert config["trainer"]["no_grad"] == [r"^_text_field_embedder\.token_embedder_elmo\."]
    words = shlex.split(train_command(DEFAULT_CONFIG, "out", overrides, recover=True))
    assert words[:5] == ["allennlp", "train", DEFAULT_CONFIG, "-s", "out"]
    assert json.loads(words[words.index("-o") + 1]) == overrides and words[-1] == "-r"


@pytest.mark.parametrize("dim,projection,highway", sorted(PUBLISHED_SIZES.values()))
def test_every_published_size_needs_no_architecture_override(tmp_path, dim, projection, highway):
    """The published options files (original, medium, small) under their download names: the
    default config with the resolved overrides states their architecture."""
    prefix = f"elmo_2x{dim}_{projection}_2048cnn_{highway}xhighway_"
    options = published_options(dim, projection, highway)
    (tmp_path / f"{prefix}options.json").write_text(json.dumps(options))
    (tmp_path / f"{prefix}weights.hdf5").write_bytes(b"")  # read by the model, not here
    overrides = continue_overrides(str(tmp_path), DEFAULT_CONFIG, "train.txt", "valid.txt")
    model = Params.from_file(DEFAULT_CONFIG, json.dumps(overrides)).as_dict()["model"]
    char_cnn = model["text_field_embedder"]["token_embedders"]["elmo"]
    assert (char_cnn["filters"], char_cnn["num_highway"]) == (FILTERS_2048, highway)
    assert (char_cnn["projection_dim"], char_cnn["embedding_dim"]) == (projection, 16)
    contextualizer = model["contextualizer"]
    assert (contextualizer["input_dim"], contextualizer["cell_size"]) == (projection, dim)
    assert (contextualizer["cell_clip"], contextualizer["proj_clip"]) == (3.0, 3.0)
    assert model["pretrained_file"] == str(tmp_path)


def test_an_override_that_does_not_parse_is_a_one_line_configuration_error(tmp_path):
    with pytest.raises(ConfigurationError, match=r"^-o does not parse: .*ERROR"):
        continue_overrides(
            str(tmp_path), DEFAULT_CONFIG, "train.txt", "valid.txt", user_overrides="{bad"
        )
    broken = tmp_path / "broken.jsonnet"
    broken.write_text('{"model": ')
    with pytest.raises(ConfigurationError, match=rf"^{broken}: [^\n]*ERROR[^\n]*$"):
        config_params(str(broken), "")


@pytest.mark.parametrize(
    "overrides, named",
    [
        ("[\n  1\n]", "-o is [1]: it must be a JSON object"),
        ('{"trainer": 5}', "-o makes trainer 5, where the config has an object"),
        ('{"model.contextualizer": "x"}', '-o makes model.contextualizer "x", where'),
    ],
)
def test_an_override_of_another_shape_is_a_configuration_error_naming_its_key(overrides, named):
    with pytest.raises(ConfigurationError) as error:
        config_params(DEFAULT_CONFIG, overrides)
    assert str(error.value).startswith(named), error.value


def test_an_override_may_set_a_config_object_to_null():
    """allennlp builds no object from null (an optional part left out)."""
    params = config_params(DEFAULT_CONFIG, '{"validation_data_loader": null, "trainer": null}')
    assert params["validation_data_loader"] is None and params["trainer"] is None


def test_a_config_that_is_a_folder_is_a_configuration_error_naming_it(tmp_path):
    """(jsonnet aborts the process on a folder.)"""
    with pytest.raises(ConfigurationError, match=f"^config {tmp_path}: no such file$"):
        config_params(str(tmp_path), "")


def test_an_override_key_the_config_lacks_is_a_configuration_error_naming_it():
    with pytest.raises(ConfigurationError, match=r"-o does not fit .*unused keys.*batch_sampler"):
        config_params(DEFAULT_CONFIG, json.dumps({"data_loader.batch_sampler.batch_size": 16}))


def test_a_trainer_key_allennlp_would_ignore_is_a_configuration_error_naming_it():
    """allennlp's trainer takes unknown keys as **kwargs: a misspelt num_epochs would train
    the config's epochs."""
    with pytest.raises(
        ConfigurationError, match=r"trainer\.num_epoch is not .*trainer\.num_epochs\?"
    ):
        config_params(DEFAULT_CONFIG, json.dumps({"trainer.num_epoch": 1}))
    params = config_params(
        DEFAULT_CONFIG, json.dumps({"trainer.num_epochs": 1, "trainer.patience": 2})
    )
    assert params["trainer"]["num_epochs"] == 1
