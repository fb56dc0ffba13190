"""Exact mid-epoch resume through the CLI: elmo_lstm_original.jsonnet shrunk, with the
`elmo_corpus` data loader shuffling; a run killed (SIGKILL) mid-epoch after a checkpoint and
then resumed with `allennlp train -r` trains exactly the batches of one uninterrupted run."""

import functools
import json
import shutil
from collections import Counter
from pathlib import Path

import pytest
from allennlp.common import Params
from allennlp.data import DatasetReader, Vocabulary

from tests.helpers import (
    CONFIG_DIR,
    TINY_CHAR_CNN_OVERRIDES,
    evaluation,
    free_port,
    text_tokens,
    train_with_probes,
)

CONFIG = str(CONFIG_DIR / "elmo_lstm_original.jsonnet")
train = functools.partial(train_with_probes, CONFIG)
KILLED_AT = (1, 11)  # epoch, batch: 2 batches after the checkpoint at batch 9 of the second epoch
KILL = ",".join(map(str, KILLED_AT))  # train's `kill`
SAVED_AT = 9
BATCH_SIZE = 16  # 4 batches a chunk (2 a process of 2): batch 9 of 24 (12) is mid-chunk


def shrunk_original(corpus: Path, num_workers: int, processes: int) -> dict:
    values = {
        "train_data_path": str(corpus / "train" / "*.txt"),
        "validation_data_path": str(corpus / "valid.txt"),
        "vocabulary.min_count.tokens": 1,
        **TINY_CHAR_CNN_OVERRIDES,
        "model.contextualizer.cell_size": 32,
        "model.num_samples": 20,
        "data_loader.batch_size": BATCH_SIZE,
        "data_loader.chunk_bytes": 4000,  # several chunks per shard: the kill is mid-chunk
        "data_loader.num_workers": num_workers,
        "trainer.num_epochs": 2,
        "trainer.cuda_device": -1,
        "trainer.checkpointer.save_every_num_batches": SAVED_AT,
        "trainer.callbacks": [{"type": "elmo_corpus_resume"}, {"type": "batch_recorder"}],
    }
    if processes > 1:
        values["distributed"] = {"cuda_devices": [-1] * processes, "master_port": free_port()}
    return values


_runs: dict[str, Path] = {}  # (config, kill, values) -> the run's folder: `shared_run`


def shared_run(
    tmp_path_factory: pytest.TempPathFactory,
    values: dict,
    kill: str | None = None,
    config: str = CONFIG,
) -> Path:
    """A folder holding `out` and `record` of one `train_with_probes` run of `config` with
    `values` (killed at `kill`), trained once per test process for equal arguments (a
    distributed run's master port aside) and only read afterwards (a test resumes a copy:
    `copied`); shared by the tests of this module and of those that import it."""
    distributed = {k: v for k, v in values.get("distributed", {}).items() if k != "master_port"}
    key = json.dumps([config, kill, {**values, "distributed": distributed}], sort_keys=True)
    if key not in _runs:
        folder = tmp_path_factory.mktemp("killed" if kill else "uninterrupted")
        result = train_with_probes(config, values, folder / "out", folder / "record", kill=kill)
        assert (result.returncode != 0) == bool(kill)
        _runs[key] = folder
    return _runs[key]


def copied(run: Path, to: Path) -> tuple[Path, Path]:
    """A copy of a `shared_run` in `to` -> its `out` and `record`."""
    shutil.copytree(run, to)
    return to / "out", to / "record"


def recorded(
    record: Path, rank: int, epoch: int, up_to: int = 10**9, key: str = "rows"
) -> dict[int, list]:
    """batch number -> rows of target ids (or with `key="shapes"` the shape of its token ids),
    for one worker's batches of one epoch."""
    lines = [json.loads(line) for line in (record / f"rank{rank}.jsonl").read_text().splitlines()]
    return {
        line["batch"]: line[key]
        for line in lines
        if line["epoch"] == epoch and line["batch"] <= up_to
    }


@pytest.mark.parametrize(
    "num_workers, processes",
    [(0, 1), (1, 1), (2, 1), (1, 2)],
    ids=["0-workers", "1-worker", "2-workers", "2-processes"],
)
@pytest.mark.slow
def test_killed_then_resumed_epoch_trains_the_uninterrupted_epochs_lines(
    tiny_corpus, tmp_path, tmp_path_factory, num_workers, processes
):
    """Per worker: the batches of the killed run up to its checkpoint plus those of the resumed
    run are the uninterrupted run's batches, batch for batch, so the multisets of lines are equal;
    and the resumed run trains nothing of the first epoch again. One process's uninterrupted run
    is read with 0 loader workers (its batches are the same whatever the workers: the loader's
    claim, tests/data/test_elmo_corpus_loader.py), shared by the cases and modules that read it."""
    values = shrunk_original(tiny_corpus, num_workers, processes)
    uninterrupted = shared_run(tmp_path_factory, shrunk_original(tiny_corpus, 0, processes))
    killed = shared_run(tmp_path_factory, values, kill=KILL)
    cut, killed_record = copied(killed, tmp_path / "killed")
    assert (cut / f"model_state_e{KILLED_AT[0]}_b{SAVED_AT}.th").is_file()
    # -r refuses a changed config
    train(values, cut, tmp_path / "resumed-record", resume=True)
    epoch = KILLED_AT[0]
    for rank in range(processes):
        whole = recorded(uninterrupted / "record", rank, epoch)
        before = recorded(killed_record, rank, epoch, up_to=SAVED_AT)
        after = recorded(tmp_path / "resumed-record", rank, epoch)
        assert sorted(before) == list(range(1, SAVED_AT + 1)) and min(after) == SAVED_AT + 1
        assert {**before, **after} == whole
        assert rows_of(before) + rows_of(after) == rows_of(whole)
        assert recorded(tmp_path / "resumed-record", rank, 0) == {}
    # Together the processes trained every window of the corpus once in the epoch.
    trained = sum(
        (rows_of(recorded(uninterrupted / "record", rank, epoch)) for rank in range(processes)),
        Counter(),
    )
    assert trained == corpus_rows(tiny_corpus, uninterrupted / "out" / "vocabulary")
    if num_workers == 0:  # validation and evaluate read with the same loader: the same perplexity
        metrics = json.loads((cut / "metrics.json").read_text())
        archive, valid = cut / "model.tar.gz", tiny_corpus / "valid.txt"
        evaluated = evaluation(archive, valid, tmp_path / "evaluated.json")
        assert evaluated["perplexity"] == pytest.approx(metrics["validation_perplexity"], rel=1e-5)


@pytest.mark.slow
def test_a_checkpoint_cut_short_by_a_kill_mid_save_is_skipped_by_resume(
    tiny_corpus, tmp_path, tmp_path_factory
):
    """A run killed while saving a checkpoint leaves its model state file cut short and no
    training state: `-r` goes on from the checkpoint before (allennlp's own checkpointer fails on
    the newest file), trains exactly the uninterrupted run's remaining batches, and removes the
    incomplete files."""
    values = shrunk_original(tiny_corpus, 0, 1)
    uninterrupted = shared_run(tmp_path_factory, values)
    killed = shared_run(tmp_path_factory, values, kill=KILL)
    cut, killed_record = copied(killed, tmp_path / "killed")
    saved = (cut / f"model_state_e{KILLED_AT[0]}_b{SAVED_AT}.th").read_bytes()
    cut_short = cut / f"model_state_e{KILLED_AT[0]}_b{KILLED_AT[1]}.th"
    cut_short.write_bytes(saved[: len(saved) // 2])
    train(values, cut, tmp_path / "resumed-record", resume=True)
    epoch = KILLED_AT[0]
    before = recorded(killed_record, 0, epoch, up_to=SAVED_AT)
    after = recorded(tmp_path / "resumed-record", 0, epoch)
    assert min(after) == SAVED_AT + 1 and {**before, **after} == recorded(
        uninterrupted / "record", 0, epoch
    )
    assert not cut_short.exists()


@pytest.mark.slow
def test_fixed_shape_trains_the_same_batches_to_the_same_losses_and_resumes_exactly(
    tiny_corpus, tmp_path
):
    """`data_loader.fixed_shape` (with a loader worker, which pads): every training batch is
    16 x 22 (batch_size x max_sequence_length 20 + <S> </S>) and holds the unpadded run's windows,
    batch for batch; without dropout both runs count the same targets (what `tokens_per_second`
    counts) and reach the same losses and perplexities; killed and resumed with -r, the run
    trains exactly the uninterrupted run's batches."""
    plain = shrunk_original(tiny_corpus, num_workers=1, processes=1)
    plain["model.dropout"] = plain["model.contextualizer.dropout"] = 0.0
    plain["trainer.callbacks"] = [*plain["trainer.callbacks"], {"type": "target_counter"}]
    plain["data_loader.fixed_shape"] = False  # (the original config's is true)
    fixed = {**plain, "data_loader.fixed_shape": True}
    train(plain, tmp_path / "plain", tmp_path / "plain-record")
    train(fixed, tmp_path / "whole", tmp_path / "whole-record")
    for epoch in range(2):
        shapes = recorded(tmp_path / "whole-record", 0, epoch, key="shapes").values()
        plain_shapes = recorded(tmp_path / "plain-record", 0, epoch, key="shapes").values()
        assert set(map(str, shapes)) == {f"[[{BATCH_SIZE}, 22]]"} != set(map(str, plain_shapes))
        whole = recorded(tmp_path / "whole-record", 0, epoch)
        assert whole == recorded(tmp_path / "plain-record", 0, epoch)
    targets = [
        json.loads((tmp_path / run / "rank0.json").read_text())
        for run in ("plain-record", "whole-record")
    ]
    assert targets[0] == targets[1]
    metrics = [
        json.loads((tmp_path / run / "metrics.json").read_text()) for run in ("plain", "whole")
    ]
    for name in ("training_loss", "training_perplexity", "validation_perplexity"):
        assert metrics[1][name] == pytest.approx(metrics[0][name], rel=1e-5), name
    killed = train(fixed, tmp_path / "cut", tmp_path / "killed-record", kill=KILL)
    assert killed.returncode != 0
    train(fixed, tmp_path / "cut", tmp_path / "resumed-record", resume=True)
    epoch = KILLED_AT[0]
    before = recorded(tmp_path / "killed-record", 0, epoch, up_to=SAVED_AT)
    after = recorded(tmp_path / "resumed-record", 0, epoch)
    assert min(after) == SAVED_AT + 1 and {**before, **after} == whole


def rows_of(batches: dict[int, list]) -> Counter:
    return Counter(tuple(row) for rows in batches.values() for row in rows)


def corpus_rows(corpus: Path, vocabulary: Path) -> Counter:
    """The target ids of every instance the config's reader makes of the training shards."""
    params = Params.from_file(CONFIG)
    reader = DatasetReader.from_params(params.pop("dataset_reader"))
    vocab = Vocabulary.from_files(str(vocabulary))
    return Counter(
        tuple(
            vocab.get_token_index(token.ensure_text(), "tokens") for token in text_tokens(instance)
        )
        for instance in reader.read(str(corpus / "train" / "*.txt"))
    )
