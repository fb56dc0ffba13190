"""bilm-tf's stateful regime through the CLI: elmo_lstm_stateful.jsonnet shrunk trains (1 process
and 2 gloo DDP processes, every token predicted once per epoch in each direction), evaluates as
validation did (the held-out text streamed in order, state carried), a run killed mid-epoch
resumes with `-r` at exactly the batch after its checkpoint, and 2 processes train to the end
where one of them gets a last batch of lone last tokens (its streams all a token shorter)."""

import functools
import itertools
import json
import math
from collections.abc import Callable
from pathlib import Path

import pytest
from allennlp.common import Params
from allennlp.data import DatasetReader

from elmo_plugin.data.elmo_streams_loader import stream_bounds, window_count
from tests.cli.test_exact_resume_cli import recorded, shared_run
from tests.helpers import (
    CONFIG_DIR,
    TINY_CHAR_CNN_OVERRIDES,
    TINY_LSTM_OVERRIDES,
    evaluation,
    free_port,
    overrides,
    run_allennlp_in_process,
    text_tokens,
    train_args,
    train_with_probes,
)

CONFIG = str(CONFIG_DIR / "elmo_lstm_stateful.jsonnet")
train = functools.partial(train_with_probes, CONFIG)
STREAMS = 8
WINDOW = 20  # 33 batches an epoch (17 a process of 2)
SAVED_AT, KILLED_AT = 6, 8  # a checkpoint (every 6 batches) and a kill 2 batches later


def shrunk(corpus: Path, processes: int = 1, window: int = WINDOW, **extra) -> dict:
    values = {k: v for k, v in TINY_LSTM_OVERRIDES.items() if not k.startswith("data_loader")}
    values.update(
        {
            "train_data_path": str(corpus / "train" / "*.txt"),
            "validation_data_path": str(corpus / "valid.txt"),
            "data_loader.batch_size": STREAMS,
            "data_loader.window_size": window,
            "data_loader.chunk_bytes": 4000,
            "validation_data_loader.batch_size": STREAMS,
            "validation_data_loader.window_size": window,
            "trainer.num_epochs": 2,
            "trainer.checkpointer.save_every_num_batches": SAVED_AT,
            "trainer.callbacks": [
                {"type": "elmo_corpus_resume"},
                {"type": "target_counter"},
                {"type": "batch_recorder"},
            ],
            **extra,
        }
    )
    if processes > 1:
        values["distributed"] = {"cuda_devices": [-1] * processes, "master_port": free_port()}
    return values


def corpus_tokens(corpus: Path) -> int:
    """Tokens (<S> and </S> included) the stateful config's reader makes of the training text."""
    reader = DatasetReader.from_params(Params.from_file(CONFIG).pop("dataset_reader"))
    return sum(
        len(text_tokens(instance)) for instance in reader.read(str(corpus / "train" / "*.txt"))
    )


@pytest.fixture(scope="module")
def uninterrupted(tiny_corpus, tmp_path_factory) -> Callable[[int], Path]:
    """processes -> the folder (`out`, `record`) of one uninterrupted run of `shrunk` on that
    many processes, shared by this module's tests (they only read it)."""
    return lambda processes: shared_run(
        tmp_path_factory, shrunk(tiny_corpus, processes), config=CONFIG
    )


@pytest.mark.parametrize("processes", [1, 2], ids=["1-process", "2-processes"])
def test_stateful_training_predicts_every_token_once_per_epoch_and_evaluates_as_validation(
    tiny_corpus, tmp_path, uninterrupted, processes
):
    run = uninterrupted(processes)
    out, record = run / "out", run / "record"
    counts = [json.loads((record / f"rank{rank}.json").read_text()) for rank in range(processes)]
    # Each stream's first token is read, never predicted forward (its last, never backward).
    for epoch in ("0", "1"):
        assert (
            sum(count[epoch] for count in counts)
            == corpus_tokens(tiny_corpus) - STREAMS * processes
        )
    batches = [len(recorded(record, rank, 0)) for rank in range(processes)]
    assert len(set(batches)) == 1
    if processes == 1:
        validation = json.loads((out / "metrics.json").read_text())["validation_perplexity"]
        archive, valid = out / "model.tar.gz", tiny_corpus / "valid.txt"
        evaluated = evaluation(archive, valid, tmp_path / "evaluated.json")
        assert evaluated["perplexity"] == pytest.approx(validation, rel=1e-5)
        # The carried state is used: the same windows from zero state score otherwise.
        stateless = overrides({"model.stateful": False})
        evaluated = evaluation(archive, valid, tmp_path / "stateless.json", "-o", stateless)
        assert evaluated["perplexity"] != pytest.approx(validation, rel=1e-3)


@pytest.mark.parametrize("processes", [1, 2], ids=["1-process", "2-processes"])
@pytest.mark.slow
def test_killed_stateful_run_resumes_at_the_batch_after_its_checkpoint(
    tiny_corpus, tmp_path, uninterrupted, processes
):
    values = shrunk(tiny_corpus, processes)
    whole_record = uninterrupted(processes) / "record"
    killed = train(values, tmp_path / "cut", tmp_path / "killed-record", kill=f"1,{KILLED_AT}")
    assert (
        killed.returncode != 0 and (tmp_path / "cut" / f"model_state_e1_b{SAVED_AT}.th").is_file()
    )
    train(values, tmp_path / "cut", tmp_path / "resumed-record", resume=True)
    for rank in range(processes):
        whole = recorded(whole_record, rank, 1)
        before = recorded(tmp_path / "killed-record", rank, 1, up_to=SAVED_AT)
        after = recorded(tmp_path / "resumed-record", rank, 1)
        assert min(after) == SAVED_AT + 1 and {**before, **after} == whole
        assert recorded(tmp_path / "resumed-record", rank, 0) == {}


def test_original_stateful_config_is_bilm_tfs_regime_and_trains_when_shrunk(tiny_corpus, tmp_path):
    """elmo_lstm_original_stateful.jsonnet: the original's model, stateful, 128 streams of
    20-token windows; shrunk (sizes, negatives, streams, device) it trains and then predicts
    the held-out text, streamed with state, better than uniformly."""
    config = str(CONFIG_DIR / "elmo_lstm_original_stateful.jsonnet")
    params = Params.from_file(config).as_dict()
    assert params["model"]["stateful"] and params["model"]["contextualizer"]["cell_size"] == 4096
    for loader in (params["data_loader"], params["validation_data_loader"]):
        assert (loader["type"], loader["batch_size"], loader["window_size"]) == (
            "elmo_streams",
            128,
            20,
        )
    values = {
        "train_data_path": str(tiny_corpus / "train" / "*.txt"),
        "validation_data_path": str(tiny_corpus / "valid.txt"),
        "vocabulary.min_count.tokens": 1,
        **TINY_CHAR_CNN_OVERRIDES,
        "model.contextualizer.cell_size": 32,
        "model.num_samples": 20,
        "data_loader.batch_size": STREAMS,
        "validation_data_loader.batch_size": STREAMS,
        "trainer.num_epochs": 2,
        "trainer.cuda_device": -1,
    }
    out = tmp_path / "out"
    run_allennlp_in_process(train_args(config, out, values))
    metrics = json.loads((out / "metrics.json").read_text())
    vocab_size = len((out / "vocabulary" / "tokens.txt").read_text().splitlines())
    assert 1 < metrics["validation_perplexity"] < vocab_size


@pytest.mark.parametrize(
    "config, extra",
    [
        ("elmo_lstm_stateful.jsonnet", {}),
        (
            "elmo_lstm_original_stateful.jsonnet",
            {"model.num_samples": 20, "vocabulary.min_count.tokens": 1},
        ),
    ],
    ids=["full-softmax", "sparse-sampled-softmax"],
)
def test_two_processes_train_to_the_end_when_one_gets_a_batch_of_lone_last_tokens(
    tiny_corpus, tmp_path, config, extra
):
    """16 x 11 + 1 tokens in 2 x 8 streams of 10-token windows: process 0's streams have 11
    tokens (1 window), process 1's last one 12 (2 windows), so both run 2 batches and process
    0's second holds only lone last tokens, in training and in validation. Both epochs train
    and validate; every token is still predicted once per epoch, the lone batch counting none."""
    words = (tiny_corpus / "valid.txt").read_text().split()
    lines = [" ".join(words[3 * line : 3 * line + 3]) for line in range(34)]  # 34 x 5 tokens
    corpus = tmp_path / "corpus"
    (corpus / "train").mkdir(parents=True)
    for path in (corpus / "train" / "text.txt", corpus / "valid.txt"):
        path.write_text("\n".join([*lines, " ".join(words[102:107])]) + "\n")  # + 7 tokens
    assert corpus_tokens(corpus) == 16 * 11 + 1
    lengths = [end - start for start, end in itertools.pairwise(stream_bounds(16 * 11 + 1, 16))]
    assert [window_count(length, 10) for length in lengths] == [1] * 15 + [2]
    out, record = tmp_path / "out", tmp_path / "record"
    train_with_probes(str(CONFIG_DIR / config), shrunk(corpus, 2, 10, **extra), out, record)
    for epoch in (0, 1):
        rank_0, rank_1 = (recorded(record, rank, epoch) for rank in (0, 1))
        assert len(rank_0) == len(rank_1) == 2
        assert [len(row) for row in rank_0[max(rank_0)]] == [1] * STREAMS
        assert sorted(len(row) for row in rank_1[max(rank_1)]) == [1] * (STREAMS - 1) + [2]
    counts = [json.loads((record / f"rank{rank}.json").read_text()) for rank in (0, 1)]
    assert [count["0"] + count["1"] for count in counts] == [2 * 8 * 10, 2 * (7 * 10 + 11)]
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["epoch"] == 1 and math.isfinite(metrics["training_loss"])
    assert 1 < metrics["validation_perplexity"] < math.inf
