"""Process settings through the real CLI: `allennlp train` (the `elmo_process_settings` callback
of elmo_lstm.jsonnet), `allennlp evaluate` (the archived `evaluation` key), `allennlp predict`
(predictor arguments) and `allennlp elmo-embed` (flags) each set them once, as configured."""

import pytest

from elmo_plugin.training.glibc_heap import USER_SETTINGS
from tests.helpers import (
    CONFIG_DIR,
    REPO_ROOT,
    TINY_LSTM_OVERRIDES,
    overrides,
    run_allennlp,
    run_allennlp_in_process,
    train_args,
)

OLD_BILM_ARCHIVE = REPO_ROOT / "fixtures" / "archives_before_layering" / "bilm_lstm.tar.gz"
KEPT = "heap kept: mmap threshold 32 MiB, trim threshold 1024 MiB"


def settings_lines(result) -> list[str]:
    """The `process settings: ...` log lines of a CLI run (allennlp logs to one of its streams)."""
    return [
        line.split(" - ")[-1]
        for line in (result.stdout + result.stderr).splitlines()
        if "elmo_plugin.training.process_settings" in line
    ]


@pytest.fixture
def no_glibc_variables(monkeypatch):
    for name in USER_SETTINGS:
        monkeypatch.delenv(name, raising=False)


def test_train_evaluate_predict_and_embed_each_set_the_configured_settings_once(
    tiny_corpus, tmp_path, no_glibc_variables
):
    out = tmp_path / "model"
    values = dict(
        TINY_LSTM_OVERRIDES,
        train_data_path=str(tiny_corpus / "valid.txt"),
        validation_data_path=str(tiny_corpus / "valid.txt"),
        **{"trainer.num_epochs": 2, "trainer.callbacks.0.tf32": True},
    )
    train = run_allennlp(train_args(CONFIG_DIR / "elmo_lstm.jsonnet", out, values))
    assert settings_lines(train) == [f"process settings: {KEPT}; TF32 on"]

    evaluate = run_allennlp(
        [
            "evaluate",
            str(out / "model.tar.gz"),
            str(tiny_corpus / "valid.txt"),
            "-o",
            overrides({"evaluation.keep_freed_heap": False}),
        ]
    )
    assert settings_lines(evaluate) == [
        "process settings: heap left as it is; TF32 as torch's defaults"
    ]

    sentences = tmp_path / "sentences.jsonl"
    sentences.write_text('{"sentence": "the file is open ."}\n{"tokens": ["a", "b"]}\n')
    predict = run_allennlp(
        [
            "predict",
            str(out / "model.tar.gz"),
            str(sentences),
            "--predictor",
            "elmo_lm_scorer",
            "--predictor-args",
            overrides({"tf32": False}),
            "--output-file",
            str(tmp_path / "scores.jsonl"),
            "--silent",
        ]
    )
    assert settings_lines(predict) == [f"process settings: {KEPT}; TF32 off"]

    text = tmp_path / "sentences.txt"
    text.write_text("the file is open .\na b\n")
    embed = ["elmo-embed", str(out / "model.tar.gz"), str(text)]
    defaults = run_allennlp([*embed, str(tmp_path / "a.hdf5")])
    assert settings_lines(defaults) == [f"process settings: {KEPT}; TF32 as torch's defaults"]
    flags = run_allennlp([*embed, str(tmp_path / "b.hdf5"), "--no-keep-freed-heap", "--tf32"])
    assert settings_lines(flags) == ["process settings: heap left as it is; TF32 on"]


def test_glibc_variables_of_the_user_win_over_keep_freed_heap(
    tmp_path, no_glibc_variables, monkeypatch
):
    monkeypatch.setenv("MALLOC_TRIM_THRESHOLD_", "131072")
    text = tmp_path / "sentences.txt"
    text.write_text("the file is open .\n")
    embed = run_allennlp(["elmo-embed", str(OLD_BILM_ARCHIVE), str(text), str(tmp_path / "a.h5")])
    assert settings_lines(embed) == [
        "process settings: heap left to your MALLOC_TRIM_THRESHOLD_; TF32 as torch's defaults"
    ]


def test_train_stops_before_the_first_batch_on_a_trainer_key_allennlp_would_ignore(
    tiny_corpus, tmp_path
):
    """`trainer.num_epoch` (for `num_epochs`): allennlp's trainer takes it as `**kwargs` and
    trains its default 20 epochs; `elmo_process_settings` reads the run's config.json first."""
    values = dict(
        TINY_LSTM_OVERRIDES,
        train_data_path=str(tiny_corpus / "valid.txt"),
        validation_data_path=str(tiny_corpus / "valid.txt"),
        **{"trainer.num_epoch": 1},
    )
    config, out = CONFIG_DIR / "elmo_lstm.jsonnet", tmp_path / "model"
    result = run_allennlp_in_process(train_args(config, out, values), check=False)
    assert result.returncode == 1
    assert result.stderr.strip().splitlines()[-1] == (
        "allennlp.common.checks.ConfigurationError: trainer.num_epoch is not a key of allennlp's "
        "trainer, which would ignore it; did you mean trainer.num_epochs?"
    )
    assert "- Training" not in result.stderr


def test_a_resume_with_another_vocabulary_is_refused(tiny_corpus, tmp_path):
    """The tokens file edited after the checkpoint, two rows swapped (the same size: the
    checkpoint loads, and every step after would train the swapped rows for the wrong tokens)."""
    valid = str(tiny_corpus / "valid.txt")
    tokens = tmp_path / "tokens.txt"
    run_allennlp(["elmo-vocab", valid, str(tokens)])
    values = dict(
        TINY_LSTM_OVERRIDES,
        train_data_path=valid,
        validation_data_path=valid,
        vocabulary={"type": "elmo_tokens_file", "tokens_file": str(tokens)},
        **{"trainer.num_epochs": 1},
    )
    args = train_args(CONFIG_DIR / "elmo_lstm.jsonnet", tmp_path / "model", values)
    run_allennlp(args)
    assert run_allennlp([*args, "-r"]).returncode == 0  # the same vocabulary: resumed
    lines = tokens.read_text(encoding="utf-8").splitlines()
    lines[3], lines[4] = lines[4], lines[3]
    tokens.write_text("\n".join(lines) + "\n", encoding="utf-8")
    refused = run_allennlp([*args, "-r"], check=False)
    last = refused.stderr.strip().splitlines()[-1]
    assert refused.returncode != 0 and "is not the one its checkpoint was trained with" in last
