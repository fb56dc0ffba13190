"""plan_vs_epoch's checks' share at a user's interval reads the right settings and log lines."""

import json
from pathlib import Path

from benchmarks import plan_vs_epoch
from benchmarks import scale_rehearsal as rehearsal
from benchmarks.support.common import CONFIG_DIR, REPO_ROOT


def test_the_suggested_original_interval_is_the_one_the_config_suggests():
    text = (CONFIG_DIR / "elmo_lstm_original.jsonnet").read_text()
    every, most = plan_vs_epoch.SUGGESTED_ORIGINAL_CHECKS.values()
    assert f'"elmo_validation_checks", every_num_batches: {every}, max_batches: {most} }}' in text


def test_the_checks_seconds_are_read_from_each_checks_log_line():
    log = "\n".join(
        [
            "2026-11-26 16:29:01,000 - INFO - elmo_plugin.training.elmo_validation_checks - "
            "elmo_validation_checks: check at batch 50: perplexity 560.3 (best so far) in 1.25 s "
            "(validation 0.5 s)",
            "2026-11-26 16:29:09,000 - INFO - elmo_plugin.training.elmo_validation_checks - "
            "elmo_validation_checks: check at batch 100: perplexity 561 in 0.75 s "
            "(validation 0.7 s)",
            "2026-11-26 16:29:17,711 - INFO - allennlp.training.gradient_descent_trainer - "
            "Epoch duration: 0:00:41.914270",
        ]
    )
    assert plan_vs_epoch.CHECK_SECONDS.findall(log) == [("1.25", "0.5"), ("0.75", "0.7")]


def test_the_demo_run_checks_as_the_demo_config_ships():
    shipped = plan_vs_epoch.checks_settings(plan_vs_epoch.DEMO_CONFIG, {"trainer.num_epochs": 1})
    callbacks = [{"type": "elmo_validation_checks", "every_num_batches": 4, "max_batches": 2}]
    overridden = plan_vs_epoch.checks_settings(
        plan_vs_epoch.DEMO_CONFIG, {"trainer.callbacks": json.loads(json.dumps(callbacks))}
    )
    assert (shipped["every_num_batches"], shipped["max_batches"]) == (50, 5)
    assert overridden == callbacks[0]


def test_the_tiny_demo_case_is_one_epoch_on_the_bundled_corpus_first_lines_checked_often(tmp_path):
    """The demo case's runs (the suite runs the original case only: the same measurement)."""
    args = plan_vs_epoch.parse_args(["--tiny", "--workdir", str(tmp_path)])
    with_checks, without = plan_vs_epoch.demo_overrides(tmp_path, args)
    corpus = REPO_ROOT / "fixtures" / "demo_corpus"
    for key, source, lines in (
        ("train_data_path", corpus / "train" / "shard_0.txt", 300),
        ("validation_data_path", corpus / "valid" / "shard_0.txt", 60),
    ):
        expected = source.read_text().splitlines(keepends=True)[:lines]
        assert Path(with_checks[key]).read_text() == "".join(expected) and len(expected) == lines
    assert with_checks["trainer.num_epochs"] == 1
    assert plan_vs_epoch.checks_settings(plan_vs_epoch.DEMO_CONFIG, with_checks) == (
        plan_vs_epoch.TINY_DEMO_CHECKS
    )
    assert without == {
        **with_checks,
        "trainer.callbacks": plan_vs_epoch.without_checks(plan_vs_epoch.DEMO_CONFIG),
    }
    assert not any(c["type"] == "elmo_validation_checks" for c in without["trainer.callbacks"])


def test_the_tiny_original_case_is_one_epoch_of_the_shrunk_original_on_a_generated_corpus(
    tmp_path,
):
    """The original case's runs: about `--train-tokens` tokens of a generated corpus with its
    793k-line tokens.txt, the held-out shard validating, checked every 4 batches on 1."""
    args = plan_vs_epoch.parse_args(["--tiny", "--workdir", str(tmp_path)])
    with_checks, without = plan_vs_epoch.original_overrides(tmp_path, args)
    train = Path(with_checks["train_data_path"]).read_text(encoding="utf-8").splitlines()
    assert 3_000 <= sum(len(line.split()) for line in train) < 3_000 + max(map(len, train))
    tokens = Path(with_checks["vocabulary"]["tokens_file"])
    assert sum(1 for _ in open(tokens, encoding="utf-8")) == 793_471
    assert list(Path(tmp_path / "heldout" / "shards").iterdir())
    assert with_checks["trainer.num_epochs"] == 1
    assert with_checks["model.contextualizer.cell_size"] == args.cell_size
    checks = plan_vs_epoch.checks_settings(rehearsal.CONFIG, with_checks)
    assert checks == {"type": "elmo_validation_checks", "every_num_batches": 4, "max_batches": 1}
    bare = plan_vs_epoch.without_checks(rehearsal.CONFIG)
    assert without == {**with_checks, "trainer.callbacks": bare}
