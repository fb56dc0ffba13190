"""TensorBoard curves from every shipped config: event files written by `allennlp train`, read back
record by record (tensorboardX has no reader) and checked against metrics and parameters."""

import json
import math
import struct
from collections import defaultdict
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from allennlp.modules.scalar_mix import ScalarMix
from tensorboardX.proto import event_pb2

from elmo_plugin.training import elmo_mix_weights, elmo_tensorboard, tokens_per_second
from elmo_plugin.training.elmo_mix_weights import ElmoMixWeightsCallback
from elmo_plugin.training.elmo_tensorboard import ElmoTensorBoardCallback
from elmo_plugin.training.tokens_per_second import TokensPerSecondCallback
from tests.helpers import (
    CONFIG_DIR,
    TINY_LSTM_OVERRIDES,
    TINY_TRANSFORMER_OVERRIDES,
    overrides,
    run_allennlp_in_process,
)


def read_scalars(folder: Path) -> dict[str, dict[int, float]]:
    """tag -> {step: value} from every event file in `folder` (TFRecord framing:
    uint64 length, uint32 crc, `length` bytes of an `Event`, uint32 crc)."""
    scalars: dict[str, dict[int, float]] = defaultdict(dict)
    files = sorted(folder.glob("events.out.tfevents.*"))
    assert files, f"no event files in {folder}"
    for path in files:
        data = path.read_bytes()
        offset = 0
        while offset < len(data):
            (length,) = struct.unpack("<Q", data[offset : offset + 8])
            event = event_pb2.Event.FromString(data[offset + 12 : offset + 12 + length])
            offset += 12 + length + 4
            for value in event.summary.value:
                scalars[value.tag][event.step] = value.simple_value
    return scalars


def close(logged: float, expected: float) -> bool:
    return logged == pytest.approx(expected, rel=1e-6, abs=1e-7)  # event scalars are float32


def test_shipped_pretraining_config_logs_every_epochs_perplexities_equal_to_metrics_json(
    tiny_bilm_archive,
):
    """elmo_lstm.jsonnet as shipped (the shared 2-epoch run): log/train and log/validation hold
    forward, backward and joint perplexity and the loss of every epoch at step epoch + 1."""
    run = tiny_bilm_archive.parent
    train, validation = (
        read_scalars(run / "log" / "train"),
        read_scalars(run / "log" / "validation"),
    )
    for epoch in range(2):
        metrics = json.loads((run / f"metrics_epoch_{epoch}.json").read_text())
        for name in ("perplexity", "forward_perplexity", "backward_perplexity", "loss"):
            assert close(
                validation[f"validation/{name}"][epoch + 1], metrics[f"validation_{name}"]
            ), name
            assert close(train[f"train/{name}"][epoch + 1], metrics[f"training_{name}"]), name
    assert (
        validation["validation/perplexity"][2] < validation["validation/perplexity"][1]
    )  # it learns


def test_transformer_run_logs_batch_curves_learning_rate_and_tokens_per_second(
    tiny_corpus, tmp_path
):
    """elmo_transformer.jsonnet, summary_interval 4: batch perplexity and loss every 4 batches,
    the learning rate of every parameter (= the optimizer's lr), and target tokens per second."""
    interval = 4
    values = dict(
        TINY_TRANSFORMER_OVERRIDES,
        train_data_path=str(tiny_corpus / "train" / "*.txt"),
        validation_data_path=str(tiny_corpus / "valid.txt"),
        **{
            "trainer.num_epochs": 2,
            "trainer.callbacks.1.summary_interval": interval,  # 0: elmo_process_settings
            "trainer.callbacks.2.summary_interval": interval,
        },
    )
    run_allennlp_in_process(
        [
            "train",
            str(CONFIG_DIR / "elmo_transformer.jsonnet"),
            "-s",
            str(tmp_path / "out"),
            "-o",
            overrides(values),
        ]
    )
    run = tmp_path / "out"
    train = read_scalars(run / "log" / "train")
    batch_steps = set(train["train/batch_perplexity"])
    assert len(batch_steps) >= 4 and all((step - 1) % interval == 0 for step in batch_steps)
    assert set(train["train/batch_loss"]) == batch_steps
    assert all(
        math.isfinite(value) and value > 1 for value in train["train/batch_perplexity"].values()
    )

    config = json.loads((run / "config.json").read_text())
    rates = {tag: steps for tag, steps in train.items() if tag.startswith("learning_rate/")}
    assert any("_contextualizer." in tag for tag in rates)
    assert all(set(steps) == batch_steps for steps in rates.values())
    assert all(
        close(value, config["trainer"]["optimizer"]["lr"])
        for steps in rates.values()
        for value in steps.values()
    )

    throughput = train["train/tokens_per_second"]
    assert len(throughput) >= 2 and set(throughput) <= batch_steps
    # Against the whole run's average (forward targets = words + one </S> per line and 40-token
    # window, over the training duration, validation included): same order of magnitude, not ms or
    # minutes.
    lines = [
        line.split()
        for shard in sorted((tiny_corpus / "train").glob("*.txt"))
        for line in shard.read_text().splitlines()
        if line.strip()
    ]
    targets_per_epoch = sum(len(words) + math.ceil(len(words) / 40) for words in lines)
    metrics = json.loads((run / "metrics.json").read_text())
    hours, minutes, seconds = (float(part) for part in metrics["training_duration"].split(":"))
    average = 2 * targets_per_epoch / (3600 * hours + 60 * minutes + seconds)
    assert all(0.3 * average < value < 30 * average for value in throughput.values()), (
        throughput,
        average,
    )


def test_distribution_interval_logs_the_updates_of_the_first_batch_trained_and_after_r(
    tiny_corpus, tmp_path
):
    """elmo_lstm.jsonnet with `distribution_interval`: the parameter updates of the first batch
    trained, whose parameters from before allennlp's callback does not keep: in a run (interval
    1: every batch's), and after `-r` from the checkpoint after batch 3 (interval 4)."""
    every = tmp_path / "every"
    run_allennlp_in_process(distribution_args(tiny_corpus, every, 1))
    train = read_scalars(every / "log" / "train")
    assert logged_updates(train) == set(train["train/batch_loss"])
    fourth = tmp_path / "fourth"
    run_allennlp_in_process(distribution_args(tiny_corpus, fourth, 4))
    first = logged_updates(read_scalars(fourth / "log" / "train"))
    (fourth / "log").rename(tmp_path / "first_log")
    for path in fourth.glob("*_state_e*.th"):
        if not path.name.endswith("_e0_b3.th"):
            path.unlink()
    run_allennlp_in_process([*distribution_args(tiny_corpus, fourth, 4), "-r"])
    assert logged_updates(read_scalars(fourth / "log" / "train")) == first


def distribution_args(corpus: Path, out: Path, interval: int) -> list[str]:
    """`allennlp train` of elmo_lstm.jsonnet into OUT for an epoch on one shard (7 batches),
    every batch's loss and every INTERVAL batches' distributions logged, a checkpoint every 3
    batches."""
    values = dict(
        TINY_LSTM_OVERRIDES,
        train_data_path=str(corpus / "train" / "shard_0.txt"),
        validation_data_path=str(corpus / "valid.txt"),
        **{
            "trainer.num_epochs": 1,
            "trainer.callbacks.1.summary_interval": 1,  # 0: elmo_process_settings
            "trainer.callbacks.1.distribution_interval": interval,
            "trainer.checkpointer.save_every_num_batches": 3,
            "trainer.checkpointer.keep_most_recent_by_count": None,
        },
    )
    return ["train", str(CONFIG_DIR / "elmo_lstm.jsonnet"), "-s", str(out), "-o", overrides(values)]


def logged_updates(train: dict[str, dict[int, float]]) -> set[int]:
    """The steps at which every parameter's update is logged (each above 0)."""
    updates = {tag: steps for tag, steps in train.items() if tag.startswith("gradient_update/")}
    assert any("_contextualizer." in tag for tag in updates)
    steps = set(next(iter(updates.values())))
    for logged in updates.values():
        assert set(logged) == steps and all(value > 0 for value in logged.values())
    assert steps
    return steps


def test_elmo_tagger_logs_mix_weights_equal_to_softmax_of_its_scalar_parameters(
    tiny_elmo_tagger_archive,
):
    """pos_tagger_elmo.jsonnet: elmo_mix/<embedder path>/weight_j and gamma every 10 batches and at
    each epoch's end; the last point equals softmax(s) and gamma of the last epoch's checkpoint."""
    run = tiny_elmo_tagger_archive.parent
    train = read_scalars(run / "log" / "train")
    prefix = "elmo_mix/text_field_embedder.token_embedder_elmo/"
    weight_tags = sorted(tag for tag in train if tag.startswith(prefix + "weight_"))
    assert weight_tags == [
        prefix + f"weight_{layer}" for layer in range(3)
    ]  # char CNN + 2 LSTM layers
    steps = sorted(train[prefix + "gamma"])
    # 6 epochs of 120 / 8 = 15 batches: every 10th batch and each epoch's last, at batches
    # completed + 1.
    assert steps == sorted(
        {10 * k + 1 for k in range(1, 10)} | {15 * epoch + 1 for epoch in range(1, 7)}
    )
    for step in steps:
        assert sum(train[tag][step] for tag in weight_tags) == pytest.approx(1.0, abs=1e-5)

    last_epoch = max(
        int(path.name.split("_e")[1].split("_")[0]) for path in run.glob("model_state_e*_b0.th")
    )
    state = torch.load(run / f"model_state_e{last_epoch}_b0.th", map_location="cpu")
    mix = "text_field_embedder.token_embedder_elmo.scalar_mix."
    expected = torch.softmax(
        torch.cat([state[mix + f"scalar_parameters.{layer}"] for layer in range(3)]), 0
    )
    for layer, tag in enumerate(weight_tags):
        assert close(train[tag][steps[-1]], expected[layer].item()), tag
    assert close(train[prefix + "gamma"][steps[-1]], state[mix + "gamma"].item())
    assert len({train[weight_tags[0]][step] for step in steps}) > 1  # a curve, not a constant

    # allennlp's own callback in the same config: the downstream metrics per epoch.
    validation = read_scalars(run / "log" / "validation")
    final = json.loads((run / f"metrics_epoch_{last_epoch - 1}.json").read_text())
    assert close(validation["validation/accuracy"][last_epoch], final["validation_accuracy"])


def test_mix_weights_callback_without_an_elmo_embedder_writes_nothing(tmp_path):
    callback = ElmoMixWeightsCallback(str(tmp_path), summary_interval=1)
    trainer = SimpleNamespace(model=torch.nn.Linear(3, 2), _total_batches_completed=1)
    callback.on_start(trainer)
    callback.on_batch(
        trainer, [], [{"loss": torch.tensor(1.0)}], {}, epoch=0, batch_number=1, is_training=True
    )
    callback.on_epoch(trainer, metrics={}, epoch=0)
    callback.on_end(trainer)
    assert list(tmp_path.iterdir()) == []


def test_on_every_process_but_rank_0_our_tensorboard_callbacks_write_nothing(tmp_path, monkeypatch):
    """allennlp tells the first process of every node `is_primary=True`: a multi-node run had a
    copy of every curve in every node's folder. elmo_tensorboard, tokens_per_second and
    elmo_mix_weights write on rank 0 only (their rank-0 curves: the tests above)."""
    for module in (elmo_tensorboard, tokens_per_second, elmo_mix_weights):
        monkeypatch.setattr(module, "is_global_primary", lambda: False)
    trainer = SimpleNamespace(
        model=torch.nn.ModuleDict({"mix": ScalarMix(2)}), _total_batches_completed=0
    )
    outputs = [{"loss": torch.tensor(1.0), "batch_weight": torch.tensor(5.0)}]
    callbacks = [
        ElmoTensorBoardCallback(str(tmp_path), summary_interval=1, should_log_learning_rate=True),
        TokensPerSecondCallback(str(tmp_path), summary_interval=1),
        ElmoMixWeightsCallback(str(tmp_path), summary_interval=1),
    ]
    for callback in callbacks:
        callback.on_start(trainer, is_primary=True)
    for batch in range(1, 4):
        trainer._total_batches_completed = batch
        for callback in callbacks:
            callback.on_batch(trainer, [], outputs, {"loss": 1.0}, 0, batch, True, is_primary=True)
    for callback in callbacks:
        callback.on_epoch(trainer, metrics={"training_loss": 1.0}, epoch=0, is_primary=True)
        callback.on_end(trainer, metrics={"training_loss": 1.0}, epoch=0, is_primary=True)
    assert list(tmp_path.iterdir()) == []
