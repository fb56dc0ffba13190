"""`elmo_corpus` has a length through the CLI: allennlp passes it to a learning-rate scheduler
that needs `num_steps_per_epoch` (slanted_triangular refuses to run without one), and its
progress bar gets a total."""

import json

from tests.cli.test_exact_resume_cli import CONFIG, shrunk_original
from tests.helpers import run_allennlp_in_process, train_args


def test_a_scheduler_that_needs_the_epoch_length_trains_on_elmo_corpus(tiny_corpus, tmp_path):
    values = shrunk_original(tiny_corpus, num_workers=0, processes=1)
    values["trainer.callbacks"] = [{"type": "elmo_corpus_resume"}]
    values["trainer.learning_rate_scheduler"] = {"type": "slanted_triangular", "num_epochs": 2}
    result = run_allennlp_in_process(train_args(CONFIG, tmp_path / "out", values))
    log = result.stdout + result.stderr
    assert "batches per epoch, estimated from" in log
    metrics = json.loads((tmp_path / "out" / "metrics.json").read_text())
    assert metrics["epoch"] == 1  # both epochs ran (0-based)
    # the bar's total: "N/N" at the end of each training epoch (tqdm's count of a finished bar)
    assert any(f"{n}/{n} [" in log for n in range(1, 1000))
