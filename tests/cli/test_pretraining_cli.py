"""`allennlp train` / `evaluate` end to end for the biLM, on tiny sizes."""

import json
import math
import signal
from typing import cast

import pytest
import torch
from allennlp.common import Params
from allennlp.data import Batch, DatasetReader, TextFieldTensors
from allennlp.models.archival import load_archive

from elmo_plugin.models.elmo_bilm import ElmoLanguageModel
from elmo_plugin.modules import elmo_lstm as elmo_lstm_module
from elmo_plugin.modules.device_paths import gpu_path_on_cpu
from tests.helpers import (
    CONFIG_DIR,
    FILTERS_2048,
    REPO_ROOT,
    TINY_LSTM_OVERRIDES,
    TINY_TRANSFORMER_OVERRIDES,
    evaluation,
    free_port,
    overrides,
    require_shared_file,
    run_allennlp,
    run_allennlp_in_process,
    train_args,
    train_with_probes,
)

DEMO = str(CONFIG_DIR / "elmo_lstm.jsonnet")


def demo_callbacks(probe: str) -> list[dict]:
    """elmo_lstm.jsonnet's trainer callbacks, then the callback `probe` of tests/cli/probes.py."""
    return [*Params.from_file(DEMO).as_dict()["trainer"]["callbacks"], {"type": probe}]


def evaluate(archive, data_file, output_file):
    """`allennlp evaluate` -> its three perplexities, as written to --output-file."""
    metrics = evaluation(archive, data_file, output_file)
    return {
        name: metrics[name] for name in ("forward_perplexity", "backward_perplexity", "perplexity")
    }


@pytest.fixture(scope="module")
def evaluated_tiny_bilm(tiny_bilm_archive, tiny_corpus, tmp_path_factory) -> dict:
    """`evaluate` of the session's tiny biLM on the tiny corpus's valid.txt, run once for the two
    tests that read it (the CPU loop's test evaluates again: its probe watches that run)."""
    output = tmp_path_factory.mktemp("evaluated_tiny_bilm") / "metrics.json"
    return evaluate(tiny_bilm_archive, tiny_corpus / "valid.txt", output)


def test_train_archive_load_evaluate_gives_identical_perplexities(
    tiny_bilm_archive, evaluated_tiny_bilm
):
    """Validation perplexity recorded during training == `allennlp evaluate` of the archive."""
    metrics = json.loads((tiny_bilm_archive.parent / "metrics.json").read_text())
    evaluated = evaluated_tiny_bilm
    assert set(evaluated) == {"forward_perplexity", "backward_perplexity", "perplexity"}
    for name, value in evaluated.items():
        assert value == pytest.approx(metrics[f"best_validation_{name}"], rel=1e-4)


def test_cpu_loop_reference_or_the_gpu_path_evaluates_to_the_fast_paths_perplexities(
    tiny_bilm_archive, tiny_corpus, tmp_path, monkeypatch
):
    """`-o '{"model.contextualizer.cpu_loop": "reference"}'` loads the archive (trained with the
    CPU fast path) with the reference loop, and `gpu_path_on_cpu` evaluates it on the GPU's
    paths (the LSTM's whole-sequence function): the same perplexities within float32 rounding;
    an unknown loop is an error naming the key."""
    whole_sequence, ran = elmo_lstm_module.sequence_clipped_lstm, []
    monkeypatch.setattr(
        elmo_lstm_module,
        "sequence_clipped_lstm",
        lambda *args: ran.append(1) or whole_sequence(*args),
    )
    valid = tiny_corpus / "valid.txt"
    fast = evaluate(tiny_bilm_archive, valid, tmp_path / "fast.json")
    loop = overrides({"model.contextualizer.cpu_loop": "reference"})
    reference = evaluation(tiny_bilm_archive, valid, tmp_path / "reference.json", "-o", loop)
    assert not ran
    with gpu_path_on_cpu():
        gpu = evaluation(tiny_bilm_archive, valid, tmp_path / "gpu.json")
    assert ran
    for name, value in fast.items():
        assert reference[name] == pytest.approx(value, rel=1e-4), name
        assert gpu[name] == pytest.approx(value, rel=1e-4), name
    unknown = {"model.contextualizer.cpu_loop": "c++"}
    failed = run_allennlp_in_process(
        ["evaluate", str(tiny_bilm_archive), str(valid), "-o", overrides(unknown)], check=False
    )
    assert failed.returncode != 0
    assert 'cpu_loop must be "fast" or "reference"' in failed.stdout + failed.stderr


def test_evaluate_without_an_output_file_logs_the_metrics_it_would_write(
    tiny_bilm_archive, evaluated_tiny_bilm, tiny_corpus
):
    """allennlp's evaluate logs its metrics only when it writes them to --output-file;
    `elmo_evaluator` (the configs' `evaluation`) logs them without it too."""
    written = evaluated_tiny_bilm  # --output-file's
    result = run_allennlp_in_process(
        ["evaluate", str(tiny_bilm_archive), str(tiny_corpus / "valid.txt")]
    )
    log = result.stdout + result.stderr
    assert log.count("Metrics: {") == 1
    logged = json.loads(log[log.index("Metrics: {") + len("Metrics: ") :].split("\n}")[0] + "}")
    assert {name: logged[name] for name in written} == written and "loss" in logged


@pytest.mark.parametrize(
    "config, sizes",
    [
        ("elmo_lstm.jsonnet", TINY_LSTM_OVERRIDES),
        ("elmo_transformer.jsonnet", TINY_TRANSFORMER_OVERRIDES),
    ],
)
@pytest.mark.slow
def test_wikitext_validation_perplexity_falls_epoch_over_epoch(config, sizes, tmp_path):
    """Two epochs: the second's validation perplexity is lower than the first's, and `allennlp
    evaluate` of the archive gives the last one."""
    lines = require_shared_file("wikitext-2/valid.txt").read_text(encoding="utf-8").splitlines()
    (tmp_path / "train.txt").write_text("\n".join(lines[:400]) + "\n", encoding="utf-8")
    (tmp_path / "valid.txt").write_text("\n".join(lines[-80:]) + "\n", encoding="utf-8")
    values = dict(
        sizes,
        train_data_path=str(tmp_path / "train.txt"),
        validation_data_path=str(tmp_path / "valid.txt"),
        **{"trainer.num_epochs": 2, "data_loader.batch_size": 32},
    )
    run_allennlp_in_process(train_args(CONFIG_DIR / config, tmp_path / "out", values))
    perplexities = [
        json.loads((tmp_path / "out" / f"metrics_epoch_{epoch}.json").read_text())[
            "validation_perplexity"
        ]
        for epoch in range(2)
    ]
    assert perplexities[0] > perplexities[1]
    evaluated = evaluate(
        tmp_path / "out" / "model.tar.gz", tmp_path / "valid.txt", tmp_path / "metrics.json"
    )
    assert evaluated["perplexity"] == pytest.approx(perplexities[1], rel=1e-4)


@pytest.mark.slow
def test_distributed_cpu_training_over_shards(tiny_corpus, tmp_path):
    """2 DDP workers x 2 loader workers over a folder of 3 shards: both workers train, and
    together they train on every target of the corpus exactly once (counted by a probe
    callback). A fresh `allennlp`: its workers started by allennlp's own `mp.spawn`, the suite's
    one run of it end to end (every other run forks them, tests/forked_allennlp.py)."""
    values = dict(
        TINY_LSTM_OVERRIDES,
        train_data_path=str(tiny_corpus / "train"),
        validation_data_path=str(tiny_corpus / "valid.txt"),
        distributed={"cuda_devices": [-1, -1], "master_port": free_port()},
        **{
            "trainer.num_epochs": 1,
            "data_loader.num_workers": 2,
            "trainer.callbacks": demo_callbacks("target_counter"),
        },
    )
    train_with_probes(DEMO, values, tmp_path / "out", tmp_path, fresh=True)
    per_worker = [json.loads((tmp_path / f"rank{rank}.json").read_text())["0"] for rank in range(2)]
    reader = DatasetReader.from_params(Params.from_file(DEMO).pop("dataset_reader"))
    corpus_targets = sum(
        len(i["source"].tokens) - 1 for i in reader.read(str(tiny_corpus / "train" / "*.txt"))
    )
    assert all(count > 0 for count in per_worker) and sum(per_worker) == corpus_targets
    metrics = json.loads((tmp_path / "out" / "metrics.json").read_text())
    assert {"peak_worker_0_memory_MB", "peak_worker_1_memory_MB"} <= set(metrics)
    assert (tmp_path / "out" / "model.tar.gz").is_file()


def test_original_config_has_the_published_sizes():
    """elmo_lstm_original.jsonnet is Peters et al. (2018)'s biLM and bilm-tf's training setup."""
    params = Params.from_file(str(CONFIG_DIR / "elmo_lstm_original.jsonnet")).as_dict()
    model, trainer = params["model"], params["trainer"]
    lstm = model["contextualizer"]
    char_cnn = model["text_field_embedder"]["token_embedders"]["elmo"]
    keys = ("type", "num_layers", "input_dim", "cell_size", "cell_clip", "proj_clip", "dropout")
    assert [lstm[key] for key in keys] == ["elmo_lstm", 2, 512, 4096, 3, 3, 0.1]
    assert model["dropout"] == 0.1 and char_cnn["filters"] == FILTERS_2048
    keys = ("num_highway", "projection_dim", "embedding_dim")
    assert [char_cnn[key] for key in keys] == [2, 512, 16]
    assert model["num_samples"] == 8192 and params["data_loader"]["batch_size"] == 128
    assert model["sparse_embeddings"] is True  # bilm-tf's sparse softmax updates
    assert params["dataset_reader"]["max_sequence_length"] == 20
    # allennlp's adagrad, applying the row gradients too
    optimizer = {"type": "elmo_adagrad", "lr": 0.2, "initial_accumulator_value": 1.0}
    assert trainer["optimizer"] == optimizer
    assert trainer["grad_norm"] == 10.0 and trainer["cuda_device"] == 0


def full_softmax_perplexity(archive, data_file) -> float:
    """The archived biLM's joint perplexity on `data_file`, computed here with the full softmax
    over every row: exp of the mean negative log likelihood of both directions' targets."""
    loaded = load_archive(str(archive))
    model, reader = loaded.model.eval(), loaded.validation_dataset_reader
    assert isinstance(model, ElmoLanguageModel)
    weight, bias = model.softmax_matrices()

    def log_probs(states: torch.Tensor) -> torch.Tensor:
        return torch.log_softmax(states @ weight.t() + bias, dim=-1)

    nll, targets = 0.0, 0
    with torch.no_grad():
        for instance in reader.read(str(data_file)):
            reader.apply_token_indexers(instance)
            batch = Batch([instance])
            batch.index_instances(model.vocab)
            source = cast(TextFieldTensors, batch.as_tensor_dict()["source"])
            layers, _ = model.bilm_encoder()(source["elmo"]["elmo_tokens"])
            forward, backward = layers[-1][0].chunk(2, dim=-1)
            rows = source["tokens"]["tokens"][0] - 1  # softmax row of each token
            nll -= float(log_probs(forward[:-1]).gather(1, rows[1:, None]).sum())
            nll -= float(log_probs(backward[1:]).gather(1, rows[:-1, None]).sum())
            targets += 2 * (len(rows) - 1)
    return math.exp(nll / targets)


@pytest.mark.slow
def test_original_config_shrunk_trains_with_sampled_softmax_and_validates_with_the_full_one(
    tiny_corpus, tmp_path
):
    """elmo_lstm_original.jsonnet with sizes overridden down: trained with 20 sampled negatives,
    its validation perplexity is the full softmax's (computed independently here) and beats a
    uniform distribution over the vocabulary."""
    values = {
        "model.text_field_embedder.token_embedders.elmo.filters": [[1, 4], [2, 4], [3, 8]],
        "model.text_field_embedder.token_embedders.elmo.projection_dim": 8,
        "model.contextualizer.input_dim": 8,
        "model.contextualizer.cell_size": 16,
        "model.num_samples": 20,
        "vocabulary.min_count.tokens": 1,
        "data_loader.batch_size": 16,
        "trainer.num_epochs": 2,  # perplexity 1150 of 1346 rows; untrained (lr 0): 1346.3
        "trainer.cuda_device": -1,
        "train_data_path": str(tiny_corpus / "train" / "*.txt"),
        "validation_data_path": str(tiny_corpus / "valid.txt"),
    }
    out = tmp_path / "out"
    run_allennlp_in_process(train_args(CONFIG_DIR / "elmo_lstm_original.jsonnet", out, values))
    validation = json.loads((out / "metrics.json").read_text())["validation_perplexity"]
    assert validation == pytest.approx(
        full_softmax_perplexity(out / "model.tar.gz", tiny_corpus / "valid.txt"), rel=1e-4
    )
    vocab_size = len((out / "vocabulary" / "tokens.txt").read_text().splitlines())
    assert validation < vocab_size


@pytest.mark.slow
def test_killed_run_resumes_from_its_last_checkpoint_with_recover(tiny_corpus, tmp_path):
    """A run killed right after epoch 0's checkpoint (by a probe callback, no timing involved)
    resumes with `-r` from exactly that checkpoint's weights, does not train epoch 0 again and
    trains epoch 1 (of 2; one shard of the tiny corpus)."""
    out = tmp_path / "out"
    values = dict(
        TINY_LSTM_OVERRIDES,
        train_data_path=str(tiny_corpus / "train" / "shard_0.txt"),
        validation_data_path=str(tiny_corpus / "valid.txt"),
        **{
            "trainer.num_epochs": 2,
            "trainer.callbacks": demo_callbacks("checkpoint_probe"),
        },
    )
    args = [*train_args(DEMO, out, values), "--include-package", "tests.cli.probes"]
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("CHECKPOINT_PROBE_KILL", "1")
        killed = run_allennlp(args, check=False)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    assert sorted(p.name for p in out.glob("metrics_epoch_*.json")) == ["metrics_epoch_0.json"]
    first_epoch = out / "metrics_epoch_0.json"
    before = (first_epoch.stat().st_mtime_ns, first_epoch.read_text())
    checkpoint = torch.load(out / "model_state_e1_b0.th")  # read now: later epochs prune it

    restored = tmp_path / "restored.th"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PYTHONPATH", str(REPO_ROOT))
        patch.setenv("CHECKPOINT_PROBE_RECORD", str(restored))
        run_allennlp_in_process([*args[:4], "-r", *args[4:]])
    resumed_with = torch.load(restored)
    assert checkpoint.keys() == resumed_with.keys()
    assert all(torch.equal(checkpoint[name], resumed_with[name]) for name in checkpoint)
    assert (
        first_epoch.stat().st_mtime_ns,
        first_epoch.read_text(),
    ) == before  # epoch 0 not trained again
    assert json.loads((out / "metrics.json").read_text())["epoch"] == 1


def test_bf16_training_through_the_cli_tracks_float32_losses(tiny_corpus, tmp_path):
    """`model.mixed_precision: bf16` on the CPU: the same seed's training and validation losses
    as float32 to bf16 accuracy (and not bit-identical: autocast ran)."""
    metrics = {}
    for precision in (None, "bf16"):
        out = tmp_path / str(precision)
        values = dict(
            TINY_LSTM_OVERRIDES,
            train_data_path=str(tiny_corpus / "train" / "shard_0.txt"),
            validation_data_path=str(tiny_corpus / "valid.txt"),
            **{"trainer.num_epochs": 2, "model.mixed_precision": precision},
        )
        run_allennlp_in_process(train_args(DEMO, out, values))
        metrics[precision] = json.loads((out / "metrics.json").read_text())
    for key in ("training_loss", "validation_loss"):
        assert metrics["bf16"][key] == pytest.approx(metrics[None][key], rel=2e-2), key
        assert metrics["bf16"][key] != metrics[None][key], key
