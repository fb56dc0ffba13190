"""CUDA: every component on a GPU equals its CPU result (TF32 off), and the CLI's GPU paths
(`allennlp train` with `cuda_device: 0`, `allennlp evaluate --cuda-device 0`,
`elmo-embed --cuda-device 0`). Runs in `make test` where CUDA is present; one skip line
otherwise. `ELMO_CUDA_TESTS_DEVICE=cpu` runs them with the CPU in the GPU's place, to check the
tests' own logic on a machine without a GPU (it proves nothing about CUDA)."""

import contextlib
import copy
import json
import os

import h5py
import pytest
import torch
from allennlp.data import Vocabulary
from allennlp.models.archival import load_archive
from allennlp.predictors import Predictor

from elmo_plugin.data.elmo_corpus_loader import ElmoCorpusLoader
from elmo_plugin.data.elmo_corpus_reader import ElmoCorpusReader
from elmo_plugin.modules.device_paths import gpu_path_on_cpu
from elmo_plugin.modules.elmo_lstm import ElmoLstmContextualizer
from elmo_plugin.modules.log_uniform_sampler import LogUniformSampler
from elmo_plugin.token_embedders.elmo_bilm_embedder import ElmoBiLmEmbedder
from tests.helpers import (
    CONFIG_DIR,
    TINY_CHAR_CNN_OVERRIDES,
    TINY_LSTM_OVERRIDES,
    TINY_TRANSFORMER_OVERRIDES,
    overrides,
    run_allennlp,
    tiny_model_and_batches,
)

DEVICE = os.environ.get("ELMO_CUDA_TESTS_DEVICE", "cuda:0")
if DEVICE.startswith("cuda") and not torch.cuda.is_available():
    pytest.skip("CUDA tests: no CUDA device here", allow_module_level=True)

GPU = torch.device(DEVICE)
CUDA_DEVICE = str(GPU.index or 0) if GPU.type == "cuda" else "-1"  # for the CLI's --cuda-device
NO_DROPOUT = {"model.dropout": 0.0, "model.contextualizer.dropout": 0.0}
CONFIGS = {
    "lstm": ("elmo_lstm.jsonnet", dict(TINY_LSTM_OVERRIDES, **NO_DROPOUT)),
    "transformer": (
        "elmo_transformer.jsonnet",
        dict(
            TINY_TRANSFORMER_OVERRIDES, **NO_DROPOUT, **{"model.contextualizer.input_dropout": 0.0}
        ),
    ),
}
SOFTMAXES = {
    "full": {},
    "sampled": {"model.num_samples": 40},
    "sampled_sparse": {"model.num_samples": 40, "model.sparse_embeddings": True},
    "sampled_rows": {
        "model.num_samples": 40,
        "model.sparse_embeddings": True,
        "model.row_gradients": True,
    },
}


@pytest.fixture(autouse=True)
def exact_float32():
    """TF32 off for matmuls and convolutions, so GPU float32 matches CPU float32."""
    saved = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved


def build(config: str, values: dict, tiny_corpus):
    """(model on CPU, two tensor batches) from a shipped config at tiny size."""
    name, base = CONFIGS[config]
    return tiny_model_and_batches(name, dict(base, **values), tiny_corpus / "valid.txt", [7, 25])


def to_device(tensors, device):
    if isinstance(tensors, dict):
        return {key: to_device(value, device) for key, value in tensors.items()}
    return tensors.to(device)


def dense(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.to_dense() if tensor.is_sparse else tensor


def negatives_from_the_cpu(model) -> None:
    """A sampled softmax's negatives drawn by the CPU's generator, whatever the model's device,
    so that the CPU and GPU models draw the same ones (each device has its own generator)."""
    sampler = getattr(model._softmax_loss, "sampler", None)
    if sampler is not None:
        draw = LogUniformSampler.sample
        sampler.sample = lambda device, sets=1: draw(sampler, torch.device("cpu"), sets).to(device)


def losses_and_gradients(model, batch, seed: int = 0):
    """Loss outputs and every parameter's (dense) gradient; the sampler's negatives drawn on the
    CPU from `seed`."""
    model.zero_grad()
    negatives_from_the_cpu(model)
    torch.manual_seed(seed)
    output = model(**batch)
    output["loss"].backward()
    grads = {
        name: dense(p.grad).cpu() for name, p in model.named_parameters() if p.grad is not None
    }
    return {key: float(output[key]) for key in ("loss", "forward_loss", "backward_loss")}, grads


def assert_close(got: torch.Tensor, want: torch.Tensor, what: str, tolerance: float = 1e-4) -> None:
    scale = float(want.abs().max()) or 1.0
    difference = float((got.cpu().float() - want.cpu().float()).abs().max())
    assert difference <= tolerance * scale, f"{what}: max abs diff {difference} (scale {scale})"


@pytest.mark.parametrize("softmax", SOFTMAXES)
@pytest.mark.parametrize("config", CONFIGS)
def test_bilm_losses_and_gradients_on_gpu_equal_cpu(config, softmax, tiny_corpus):
    """indexer -> char CNN -> contextualizer -> softmax (full, sampled, sampled with sparse
    softmax gradients): the same losses and gradients on the GPU as on the CPU."""
    model, batches = build(config, SOFTMAXES[softmax], tiny_corpus)
    gpu_model = copy.deepcopy(model).to(GPU)
    model.train(), gpu_model.train()
    for batch in batches:
        cpu_losses, cpu_grads = losses_and_gradients(model, batch)
        gpu_losses, gpu_grads = losses_and_gradients(gpu_model, to_device(batch, GPU))
        for key in cpu_losses:
            assert gpu_losses[key] == pytest.approx(cpu_losses[key], rel=1e-5), key
        assert cpu_grads.keys() == gpu_grads.keys()
        for name in cpu_grads:
            assert_close(gpu_grads[name], cpu_grads[name], name)


@pytest.mark.parametrize("config", CONFIGS)
def test_every_layer_on_gpu_equals_cpu_in_eval_mode(config, tiny_corpus):
    model, batches = build(config, {}, tiny_corpus)
    cpu_encoder = model.eval().bilm_encoder()
    gpu_encoder = copy.deepcopy(model).to(GPU).eval().bilm_encoder()
    for batch in batches:
        char_ids = batch["source"]["elmo"]["elmo_tokens"]
        with torch.no_grad():
            cpu_layers, cpu_mask = cpu_encoder(char_ids)
            gpu_layers, gpu_mask = gpu_encoder(char_ids.to(GPU))
        assert torch.equal(gpu_mask.cpu(), cpu_mask)
        for index, (got, want) in enumerate(zip(gpu_layers, cpu_layers, strict=True)):
            assert_close(got, want, f"layer {index}", 1e-5)


@pytest.mark.parametrize("compile_on_gpu", [True, False])
def test_gpu_clipped_lstm_equals_cpu_in_values_and_gradients(compile_on_gpu):
    """The GPU's whole-sequence function (fixed shapes; its pointwise steps compiled by
    torch.compile where Triton is installed) against the CPU fast path, with padding and a
    length-1 sentence, clips binding. (`gpu_path_on_cpu` makes the CPU stand-in run it too.)"""
    torch.manual_seed(0)
    lstm = ElmoLstmContextualizer(
        8,
        24,
        2,
        cell_clip=0.5,
        proj_clip=0.3,
        return_all_layers=True,
        compile_on_gpu=compile_on_gpu,
    )
    for parameter in lstm.parameters():
        torch.nn.init.normal_(parameter, std=0.5)
    gpu_lstm = copy.deepcopy(lstm).to(GPU)
    lengths = torch.tensor([6, 1, 4, 6, 3])
    mask = torch.arange(6) < lengths.unsqueeze(1)
    inputs = torch.randn(5, 6, 8)
    weights = [torch.randn(5, 6, 16) for _ in range(2)]
    results = []
    paths = ((lstm, "cpu", contextlib.nullcontext()), (gpu_lstm, GPU, gpu_path_on_cpu()))
    for module, device, path in paths:
        leaf = inputs.to(device).requires_grad_()
        with path:
            layers = module(leaf, mask.to(device))
        loss = sum(
            (layer * weight.to(device)).sum() for layer, weight in zip(layers, weights, strict=True)
        )
        grads = torch.autograd.grad(loss, [leaf, *module.parameters()])
        results.append((layers, grads))
    (cpu_layers, cpu_grads), (gpu_layers, gpu_grads) = results
    for index, (got, want) in enumerate(zip(gpu_layers, cpu_layers, strict=True)):
        assert_close(got, want, f"layer {index}", 1e-5)
    for index, (got, want) in enumerate(zip(gpu_grads, cpu_grads, strict=True)):
        assert_close(got, want, f"gradient {index}")


@pytest.mark.parametrize("config", CONFIGS)
def test_bf16_on_gpu_tracks_float32(config, tiny_corpus):
    model, batches = build(config, {"model.num_samples": 40}, tiny_corpus)
    model = model.to(GPU).train()
    fp32, _ = losses_and_gradients(model, to_device(batches[1], GPU))
    model.mixed_precision = "bf16"
    bf16, grads = losses_and_gradients(model, to_device(batches[1], GPU))
    for key in fp32:
        assert bf16[key] == pytest.approx(fp32[key], rel=2e-2), key
    assert all(
        grad.dtype == torch.float32 and torch.isfinite(grad).all() for grad in grads.values()
    )


def test_embedder_and_predictor_on_gpu_equal_cpu(tiny_bilm_archive):
    torch.manual_seed(0)
    cpu_embedder = ElmoBiLmEmbedder(
        Vocabulary(), pretrained_file=str(tiny_bilm_archive), dropout=0.0
    ).eval()
    gpu_embedder = copy.deepcopy(cpu_embedder).to(GPU)
    from allennlp.modules.elmo import batch_to_ids

    char_ids = batch_to_ids([["The", "file", "is", "open", "."], ["Return", "it"]])
    with torch.no_grad():
        assert_close(gpu_embedder(char_ids.to(GPU)), cpu_embedder(char_ids), "embedder", 1e-5)
    inputs = [{"sentence": "The file is open ."}, {"sentence": "Return the value"}]
    cpu = Predictor.from_archive(load_archive(str(tiny_bilm_archive)), "elmo_embeddings")
    gpu = Predictor.from_archive(
        load_archive(str(tiny_bilm_archive), cuda_device=int(CUDA_DEVICE)), "elmo_embeddings"
    )
    for want, got in zip(
        cpu.predict_batch_json(inputs), gpu.predict_batch_json(inputs), strict=True
    ):
        assert want.keys() == got.keys()
        for key in want:
            if isinstance(want[key], list) and want[key] and not isinstance(want[key][0], str):
                assert_close(torch.tensor(got[key]), torch.tensor(want[key]), key, 1e-5)
            else:
                assert got[key] == want[key]


def test_elmo_embed_with_cuda_device_equals_cpu(tiny_bilm_archive, tiny_corpus, tmp_path):
    lines = (tiny_corpus / "valid.txt").read_text().splitlines()[:40]
    text = tmp_path / "input.txt"
    text.write_text("\n".join(lines) + "\n")
    outputs = {}
    for device in ("-1", CUDA_DEVICE):
        output = tmp_path / f"vectors_{device}.hdf5"
        run_allennlp(
            ["elmo-embed", str(tiny_bilm_archive), str(text), str(output), "--cuda-device", device]
        )
        with h5py.File(output, "r") as vectors:
            outputs[device] = {
                name: vectors[name][()] for name in vectors if name != "sentence_to_index"
            }
    assert outputs[CUDA_DEVICE].keys() == outputs["-1"].keys() and len(outputs["-1"]) == len(lines)
    for name, want in outputs["-1"].items():
        assert_close(
            torch.from_numpy(outputs[CUDA_DEVICE][name]), torch.from_numpy(want), name, 1e-5
        )


@pytest.mark.parametrize(
    "config, values",
    [
        ("elmo_lstm.jsonnet", TINY_LSTM_OVERRIDES),
        (
            "elmo_transformer.jsonnet",
            dict(TINY_TRANSFORMER_OVERRIDES, **{"model.mixed_precision": "bf16"}),
        ),
        (
            "elmo_lstm_original.jsonnet",  # sparse softmax gradients with Adagrad, shrunk
            {
                **TINY_CHAR_CNN_OVERRIDES,
                "model.contextualizer.cell_size": 32,
                "model.num_samples": 40,
                "model.sparse_embeddings": True,
                "data_loader.batch_size": 16,
                "data_loader.num_workers": 0,
            },
        ),
    ],
)
def test_allennlp_train_and_evaluate_on_gpu(config, values, tiny_corpus, tmp_path):
    """`allennlp train` with `cuda_device: 0`, then `allennlp evaluate` on the GPU and on the
    CPU give the same perplexities."""
    out = tmp_path / "model"
    values = dict(
        values,
        train_data_path=str(tiny_corpus / "train" / "*.txt"),
        validation_data_path=str(tiny_corpus / "valid.txt"),
        **{
            "trainer.num_epochs": 1,
            "trainer.cuda_device": int(CUDA_DEVICE),
            "trainer.callbacks.0.tf32": False,  # elmo_process_settings (train)
            "evaluation.tf32": False,  # elmo_evaluator (evaluate; kept in the archive)
        },
    )
    run_allennlp(["train", str(CONFIG_DIR / config), "-s", str(out), "-o", overrides(values)])
    metrics = {}
    for device in (CUDA_DEVICE, "-1"):
        metrics_file = tmp_path / f"metrics_{device}.json"
        run_allennlp(
            [
                "evaluate",
                str(out / "model.tar.gz"),
                str(tiny_corpus / "valid.txt"),
                "--cuda-device",
                device,
                "--output-file",
                str(metrics_file),
            ]
        )
        metrics[device] = json.loads(metrics_file.read_text())
    for key in ("forward_perplexity", "backward_perplexity", "perplexity"):
        assert metrics[CUDA_DEVICE][key] == pytest.approx(
            metrics["-1"][key], rel=2e-2 if "bf16" in str(values) else 1e-5
        )
    assert metrics[CUDA_DEVICE]["perplexity"] < len(
        Vocabulary.from_files(str(out / "vocabulary")).get_token_to_index_vocabulary("tokens")
    )


@pytest.mark.parametrize("num_workers", [0, 1])
def test_loader_batches_reach_the_gpu_from_pinned_memory_without_a_host_wait(
    num_workers, tiny_corpus, monkeypatch
):
    """The `elmo_corpus` loader with `fixed_shape` and the GPU as its target: every tensor of
    every batch is copied from pinned memory with `non_blocking` (under CUDA's sync debug mode
    "error", where a blocking copy raises), one shape throughout, equal to the CPU batches."""
    reader = ElmoCorpusReader(max_sequence_length=20)
    loaders = [
        ElmoCorpusLoader(
            reader,
            str(tiny_corpus / "train" / "*.txt"),
            batch_size=16,
            shuffle=True,
            chunk_bytes=4000,
            num_workers=num_workers,
            seed=1,
            fixed_shape=True,
        )
        for _ in range(2)
    ]
    vocab = Vocabulary.from_instances(loaders[0].iter_instances())
    for loader in loaders:
        loader.index_with(vocab)
    loaders[1].set_target_device(GPU)
    expected = list(loaders[0])
    copies: list[tuple[bool, bool]] = []
    original_to = torch.Tensor.to

    def recorded_to(tensor, *args, **kwargs):
        copies.append((tensor.is_pinned(), kwargs.get("non_blocking", False)))
        return original_to(tensor, *args, **kwargs)

    monkeypatch.setattr(torch.Tensor, "to", recorded_to)
    if GPU.type == "cuda":
        torch.cuda.set_sync_debug_mode("error")
    try:
        batches = list(loaders[1])
    finally:
        if GPU.type == "cuda":
            torch.cuda.set_sync_debug_mode("default")
        monkeypatch.undo()
    on_gpu = GPU.type == "cuda"
    assert copies == [(on_gpu, on_gpu)] * (2 * len(expected))  # token ids, character ids
    for batch, cpu_batch in zip(batches, expected, strict=True):
        for name in ("tokens", "elmo"):
            (got,), (want,) = batch["source"][name].values(), cpu_batch["source"][name].values()
            assert got.device == GPU and got.shape[:2] == (16, 22)
            assert torch.equal(got.cpu(), want)
