"""Transformer ELMo: our `elmo_bilm` + `elmo_transformer` vs allennlp-models' `language_model` +
`bidirectional_language_model_transformer`, same sizes, same data, in one run.

Sides (all with the same reader windows, vocabulary, softmax, optimizer settings, batches, seeds):
- ours: our config as shipped (`elmo_char_cnn`, `elmo_transformer`, optimizer `fused_adam`);
- theirs: allennlp-models' reference, as its
  `training_config/lm/bidirectional_language_model.jsonnet` builds it at the same sizes:
  `elmo_characters` indexer, `character_encoding` + `cnn-highway` (layer norm, projection after
  highway), `language_model` + `bidirectional_language_model_transformer`, allennlp's `adam`;
- theirs + our CNN/optimizer: theirs with our `elmo_char_cnn` and `fused_adam`, so that the ratio
  against it is the contextualizer (and model class) alone.
Training goes through allennlp's own `TrainModel` / `GradientDescentTrainer` (what `allennlp train`
runs), timed by a trainer callback after every optimizer step.

1. Speed (published sizes by default): training tokens/s, in alternating rounds (the order of
   the sides reversed every round) so that load from other processes hits all alike; median
   per side. Also the contextualizers alone (forward + backward on one batch).
2. Quality (demo sizes by default): validation perplexity after the same number of steps,
   token-weighted over the whole validation split with the full softmax, computed by the
   same function for every model. Ours and theirs with several seeds (at 120 steps one seed
   moves a model's perplexity by a few percent), compared by their geometric means.

Data: $ELMO_PLUGIN_DATA/wikitext-2/valid.txt (default ../shared/data): first 90% of lines train,
last 10% validation. Skipped with a message if missing. Usage (from the repo root):
    python -m benchmarks.transformer_vs_allennlp_models [--speed-steps 4] [--speed-rounds 3]
        [--quality-steps 120] [--quality-seeds 3] [--threads 1] [--cuda-device -1]
        [--skip-speed] [--skip-quality]
About 25 minutes on one CPU core with the defaults. Ends with one JSON line
(benchmarks/support/common.py): `speed_ratio_ours_theirs` (training tokens/s, target >= 1.5) and
`quality_ratio_ours_theirs` (validation perplexity, geometric mean over seeds, target <= 1.05).
"""

import contextlib
import copy
import gc
import json
import math
import shutil
import statistics
import tempfile
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from allennlp.commands.train import TrainModel
from allennlp.common import Params
from allennlp.common.util import prepare_environment
from allennlp.data import DatasetReader, Vocabulary
from allennlp.data.data_loaders import MultiProcessDataLoader
from allennlp.models import Model
from allennlp.nn import util as nn_util
from allennlp.training.callbacks import TrainerCallback

import elmo_plugin  # noqa: F401  (registers our components)
from benchmarks.support.common import (
    CONFIG_DIR,
    Declaration,
    benchmark_parser,
    require_data,
    run_benchmark,
)
from benchmarks.support.wikitext_data import WIKITEXT, wikitext_file, write_train_valid

NAME = "transformer_vs_allennlp_models"
SIDES = ("ours", "theirs", "theirs_our_cnn")
NAMES = {
    "ours": "ours",
    "theirs": "theirs (reference)",
    "theirs_our_cnn": "theirs + our CNN/optimizer",
    "ours_from_end": "ours, backward_positions from_end",
}
CLOCKS: dict[str, list[tuple[float, int]]] = {}


@TrainerCallback.register("transformer_benchmark_clock")
class BatchClock(TrainerCallback):
    """Records (time, real tokens) after every training batch, keyed by serialization dir."""

    def on_start(self, trainer, is_primary: bool = True, **kwargs) -> None:
        CLOCKS[self.serialization_dir] = []

    def on_batch(
        self,
        trainer,
        batch_inputs,
        batch_outputs,
        batch_metrics,
        epoch,
        batch_number,
        is_training,
        is_primary=True,
        batch_grad_norm=None,
        **kwargs,
    ) -> None:
        if is_training:
            tokens = sum(
                int((batch["source"]["tokens"]["tokens"] > 0).sum()) for batch in batch_inputs
            )
            CLOCKS[self.serialization_dir].append((time.perf_counter(), tokens))


def tokens_per_second(clock: list[tuple[float, int]], warmup: int) -> float:
    """Throughput over the batches after the first `warmup` ones."""
    start, _ = clock[warmup - 1]
    end, _ = clock[-1]
    return sum(tokens for _, tokens in clock[warmup:]) / (end - start)


def split_wikitext(out: Path) -> tuple[Path, Path, str]:
    """train.txt / valid.txt in `out`: first 90% / last 10% of WikiText-2 valid.txt lines."""
    source = wikitext_file()
    require_data(source)
    split = write_train_valid(source, out / "train.txt", out / "valid.txt")
    return out / "train.txt", out / "valid.txt", split


def build_vocabulary(
    reader_params: dict, train: Path, min_count: int, out: Path
) -> tuple[Path, int]:
    """One vocabulary (training tokens seen `min_count` times, by frequency) saved for both
    sides."""
    reader = DatasetReader.from_params(Params(copy.deepcopy(reader_params)))
    with quiet(out / "vocabulary.log"):
        vocab = Vocabulary.from_instances(reader.read(str(train)), min_count={"tokens": min_count})
    folder = out / f"vocabulary_min_count_{min_count}"
    shutil.rmtree(folder, ignore_errors=True)
    vocab.save_to_files(str(folder))
    return folder, vocab.get_vocab_size("tokens")


@contextlib.contextmanager
def quiet(log: Path) -> Iterator[None]:
    """Progress bars (allennlp writes them to stderr) and warnings to `log`, not the terminal."""
    with open(log, "a") as stream, contextlib.redirect_stderr(stream), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # e.g. allennlp-models' experimental-feature warning
        yield


def our_config(config_file: str, batch_size: int, overrides: dict) -> dict:
    """Our training config with `overrides`, 8 heads (theirs are fixed at 8) and `batch_size`."""
    config = Params.from_file(
        str(CONFIG_DIR / config_file), params_overrides=json.dumps(overrides)
    ).as_dict()
    config.pop("evaluation")  # allennlp evaluate's key: `allennlp train` drops it before TrainModel
    config["model"]["contextualizer"]["num_attention_heads"] = 8
    loader = config["data_loader"]
    (loader["batch_sampler"] if "batch_sampler" in loader else loader)["batch_size"] = batch_size
    return config


def reference_character_encoder(char_cnn: dict) -> dict:
    """allennlp-models' transformer-ELMo token embedder (`character_encoding` + `cnn-highway`, as
    in its bidirectional_language_model.jsonnet) at the sizes of our `elmo_char_cnn` block."""
    sizes = {
        key: char_cnn[key] for key in ("embedding_dim", "filters", "num_highway", "projection_dim")
    }
    return {
        "type": "character_encoding",
        "embedding": {"num_embeddings": 262, "embedding_dim": char_cnn["embedding_dim"]},
        "encoder": {
            "type": "cnn-highway",
            "activation": "relu",
            "projection_location": "after_highway",
            "do_layer_norm": True,
            **sizes,
        },
    }


def their_config(ours: dict, reference_embedder: bool) -> dict:
    """The same config with allennlp-models' bidirectional `language_model` and transformer; with
    `reference_embedder` also their character encoder, indexer and allennlp's plain `adam`."""
    config = copy.deepcopy(ours)
    model = config["model"]
    mine = model["contextualizer"]
    model.update(
        type="language_model",
        bidirectional=True,
        contextualizer={
            "type": "bidirectional_language_model_transformer",
            "hidden_dim": mine["feedforward_hidden_dim"],  # their name for the feed-forward width
            **{key: mine[key] for key in ("input_dim", "num_layers", "dropout", "input_dropout")},
        },
    )
    if reference_embedder:
        char_cnn = model["text_field_embedder"]["token_embedders"]["elmo"]
        model["text_field_embedder"]["token_embedders"] = {
            "tokens": {"type": "empty"},
            "token_characters": reference_character_encoder(char_cnn),
        }
        config["dataset_reader"]["token_indexers"] = {
            "tokens": {"type": "single_id"},
            "token_characters": {"type": "elmo_characters"},
        }
        config["trainer"]["optimizer"]["type"] = "adam"
        model["sparse_embeddings"] = (
            False  # as their bidirectional_language_model.jsonnet (and adam is dense-only)
        )
    return config


def training_run(
    config: dict, train: Path, vocab_dir: Path, steps: int, cuda_device: int, out: Path
) -> tuple[Model, list]:
    """`steps` optimizer steps through allennlp's TrainModel; returns the model and its clock."""
    config = copy.deepcopy(config)
    config.update(
        train_data_path=str(train), vocabulary={"type": "from_files", "directory": str(vocab_dir)}
    )
    config.pop("validation_data_path", None)
    loader = config["data_loader"]
    if loader.get("type") == "elmo_corpus":  # batches_per_epoch is allennlp's multiprocess loader's
        config["data_loader"] = loader = {
            key: loader[key] for key in ("batch_size", "shuffle", "num_workers") if key in loader
        }
    loader["batches_per_epoch"] = steps
    config["trainer"].update(
        num_epochs=1,
        cuda_device=cuda_device,
        callbacks=[{"type": "transformer_benchmark_clock"}],
        checkpointer={"save_completed_epochs": False},
    )
    config["trainer"].pop(
        "learning_rate_scheduler", None
    )  # noam would keep lr near 0 for 6000 steps
    params = Params(config)
    prepare_environment(params)
    shutil.rmtree(out, ignore_errors=True)  # a re-used --out folder
    out.mkdir(parents=True)
    with quiet(out / "train.log"):
        train_loop = TrainModel.from_params(params=params, serialization_dir=str(out), local_rank=0)
        train_loop.run()
    return train_loop.model, CLOCKS[str(out)]


def direction_nll(
    model: Model, embeddings: torch.Tensor, targets: torch.Tensor, where: torch.Tensor
) -> torch.Tensor:
    """Summed NLL of word ids `targets` from `embeddings` (batch, timesteps, dim) at `where`,
    through the model's own softmax (full softmax in eval mode; its rows skip padding id 0)."""
    softmax_loss: Any = model._softmax_loss
    return softmax_loss(embeddings[where], targets[where] - 1)


def validation_perplexity(
    model: Model, reader_params: dict, valid: Path, cuda_device: int
) -> dict[str, float]:
    """Forward, backward and joint perplexity, token-weighted over the whole file, full softmax.
    Targets are defined here, the same for both models: forward at t -> token t + 1, backward at
    t -> token t - 1, for real tokens only (allennlp-models' `LanguageModel` also gives the first
    padding position of each padded sentence a backward target, which would skew its number)."""
    reader = DatasetReader.from_params(Params(copy.deepcopy(reader_params)))
    loader = MultiProcessDataLoader(reader, str(valid), batch_size=64)
    loader.index_with(model.vocab)
    forward_nll = backward_nll = targets = 0.0
    model.eval()
    with torch.no_grad(), quiet(valid.parent / "validation.log"):
        for batch in loader:
            batch = nn_util.move_to_device(batch, cuda_device)
            output = model(**batch)
            forward, backward = output["lm_embeddings"].chunk(2, dim=-1)
            ids, mask = batch["source"]["tokens"]["tokens"], output["mask"]
            pairs = mask[:, 1:] & mask[:, :-1]  # (t, t + 1) both real
            forward_nll += float(direction_nll(model, forward[:, :-1], ids[:, 1:], pairs))
            backward_nll += float(direction_nll(model, backward[:, 1:], ids[:, :-1], pairs))
            targets += float(pairs.sum())
    forward, backward = forward_nll / targets, backward_nll / targets
    return {
        "forward": math.exp(forward),
        "backward": math.exp(backward),
        "joint": math.exp((forward + backward) / 2),
    }


def contextualizer_seconds(model: Model, batch_size: int, timesteps: int, repeats: int) -> float:
    """Median seconds for one forward + backward of the contextualizer alone on random inputs."""
    contextualizer: Any = model._contextualizer
    contextualizer.train()
    device = next(contextualizer.parameters()).device
    inputs = torch.randn(batch_size, timesteps, contextualizer.get_input_dim(), device=device)
    mask = torch.ones(batch_size, timesteps, dtype=torch.bool, device=device)
    mask[batch_size // 2 :, timesteps * 3 // 4 :] = False
    times = []
    for _ in range(repeats + 1):
        start = time.perf_counter()
        contextualizer(inputs, mask).pow(2).mean().backward()
        if device.type == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    contextualizer.zero_grad(set_to_none=True)
    return statistics.median(times[1:])


def describe(config: dict) -> str:
    model, loader = config["model"], config["data_loader"]
    cnn, ctx = model["text_field_embedder"]["token_embedders"]["elmo"], model["contextualizer"]
    batch = loader.get("batch_sampler", loader)["batch_size"]
    softmax = (
        f"sampled softmax {model['num_samples']}" if model.get("num_samples") else "full softmax"
    )
    filters = sum(count for _, count in cnn["filters"])
    return (
        f"{ctx['num_layers']} layers x {ctx['input_dim']}/{ctx['feedforward_hidden_dim']} "
        f"per direction, 8 heads; char CNN {filters} filters, {cnn['num_highway']} highway -> "
        f"{cnn['projection_dim']}; {softmax}; batch {batch}, "
        f"windows of {config['dataset_reader']['max_sequence_length']} tokens"
    )


def parameter_count(model: Model) -> int:
    contextualizer: Any = model._contextualizer
    return sum(parameter.numel() for parameter in contextualizer.parameters())


def prepare_part(
    config_file: str, batch_size: int, min_count: int, train: Path, out: Path
) -> tuple[dict, Path]:
    """Both sides' configs and a vocabulary for one part; prints what they are."""
    ours = our_config(config_file, batch_size, {})
    vocab_dir, vocab_size = build_vocabulary(ours["dataset_reader"], train, min_count, out)
    print(
        f"   {describe(ours)}; vocabulary {vocab_size:,d} entries "
        f"(training tokens seen >= {min_count} times)"
    )
    configs = {
        "ours": ours,
        "theirs": their_config(ours, True),
        "theirs_our_cnn": their_config(ours, False),
    }
    return configs, vocab_dir


def speed_part(args, train: Path, out: Path) -> dict[str, float]:
    sizes = "published sizes" if "original" in args.speed_config else "sizes of that config"
    print(f"\n1. SPEED, {args.speed_config} ({sizes}):")
    configs, vocab_dir = prepare_part(args.speed_config, args.speed_batch_size, 1, train, out)
    print(
        f"   {args.speed_rounds} alternating rounds per side, each a fresh training run: "
        f"1 warm-up step, then {args.speed_steps} timed steps"
    )
    rates: dict[str, list[float]] = {side: [] for side in SIDES}
    alone: dict[str, list[float]] = {side: [] for side in SIDES}
    timesteps = configs["ours"]["dataset_reader"]["max_sequence_length"] + 2
    for round_index in range(args.speed_rounds):
        for side in SIDES if round_index % 2 == 0 else SIDES[::-1]:
            model, clock = training_run(
                configs[side],
                train,
                vocab_dir,
                args.speed_steps + 1,
                args.cuda_device,
                out / f"speed_{side}_{round_index}",
            )
            rates[side].append(tokens_per_second(clock, warmup=1))
            alone[side].append(
                contextualizer_seconds(model, args.speed_batch_size, timesteps, repeats=3)
            )
            print(
                f"   round {round_index + 1} {NAMES[side]:27s}: "
                f"training {rates[side][-1]:8.1f} tokens/s; contextualizer alone "
                f"{alone[side][-1] * 1000:7.1f} ms forward+backward "
                f"({parameter_count(model):,d} parameters)",
                flush=True,
            )
            del model
    ours, theirs, theirs_our_cnn = (statistics.median(rates[side]) for side in SIDES)
    ours_alone, theirs_alone, _ = (statistics.median(alone[side]) for side in SIDES)
    print(
        f"   training tokens/s, median: ours {ours:.1f}, theirs (reference) {theirs:.1f}, "
        f"theirs + our CNN/optimizer {theirs_our_cnn:.1f}"
    )
    print(f"   RATIO ours / theirs (reference): {ours / theirs:.2f}x (target >= 1.5x)")
    print(
        f"   ratio ours / theirs + our CNN/optimizer: {ours / theirs_our_cnn:.2f}x "
        "(contextualizer and model class alone)"
    )
    print(
        f"   contextualizer alone, batch {args.speed_batch_size} x {timesteps}, median: "
        f"ours {ours_alone * 1000:.1f} ms, theirs {theirs_alone * 1000:.1f} ms: "
        f"ratio theirs/ours {theirs_alone / ours_alone:.2f}x"
    )
    return {
        "speed_ours_tokens_per_s": round(ours, 1),
        "speed_theirs_tokens_per_s": round(theirs, 1),
        "speed_theirs_our_cnn_tokens_per_s": round(theirs_our_cnn, 1),
        "speed_ratio_ours_theirs": round(ours / theirs, 2),
        "speed_ratio_ours_theirs_our_cnn": round(ours / theirs_our_cnn, 2),
        "speed_contextualizer_theirs_over_ours": round(theirs_alone / ours_alone, 2),
    }


def seeded(config: dict, seed: int) -> dict:
    """`config` with allennlp's random, numpy and torch seeds all set to `seed`."""
    return {**copy.deepcopy(config), "random_seed": seed, "numpy_seed": seed, "pytorch_seed": seed}


def geometric_mean(values: list[float]) -> float:
    return math.exp(statistics.mean(math.log(value) for value in values))


def quality_part(args, train: Path, valid: Path, out: Path) -> dict[str, float]:
    print(f"\n2. VALIDATION PERPLEXITY, {args.quality_config} (smaller sizes):")
    configs, vocab_dir = prepare_part(args.quality_config, args.quality_batch_size, 2, train, out)
    # Ours numbers the backward stack's positions from the sentence start by default, as
    # allennlp-models does; also run the strict right-to-left option.
    configs["ours_from_end"] = copy.deepcopy(configs["ours"])
    configs["ours_from_end"]["model"]["contextualizer"]["backward_positions"] = "from_end"
    seeds = list(range(1, args.quality_seeds + 1))
    print(
        f"   {args.quality_steps} training steps each (same batches), then the whole validation "
        f"split; ours and theirs with seeds {seeds} (initialization, dropout, shuffling), "
        "the others with seed 1"
    )
    results: dict[str, list[dict[str, float]]] = {}
    rates, alone = {}, {}
    timesteps = configs["ours"]["dataset_reader"]["max_sequence_length"] + 2
    runs = [(side, seed) for seed in seeds for side in ("ours", "theirs")]
    runs += [("theirs_our_cnn", seeds[0]), ("ours_from_end", seeds[0])]
    for side, seed in runs:
        model, clock = training_run(
            seeded(configs[side], seed),
            train,
            vocab_dir,
            args.quality_steps,
            args.cuda_device,
            out / f"quality_{side}_{seed}",
        )
        result = validation_perplexity(
            model, configs[side]["dataset_reader"], valid, args.cuda_device
        )
        results.setdefault(side, []).append(result)
        if seed == seeds[0]:
            rates[side] = tokens_per_second(clock, warmup=min(5, args.quality_steps - 1))
            alone[side] = contextualizer_seconds(
                model, args.quality_batch_size, timesteps, repeats=5
            )
        print(
            f"   {NAMES[side]:33s} seed {seed}: validation perplexity {result['joint']:8.2f} "
            f"(forward {result['forward']:.2f}, backward {result['backward']:.2f})",
            flush=True,
        )
        del model
    means = {
        side: {
            key: geometric_mean([r[key] for r in runs_]) for key in ("joint", "forward", "backward")
        }
        for side, runs_ in results.items()
    }
    per_seed = [
        f"{ours['joint'] / theirs['joint']:.3f}"
        for ours, theirs in zip(results["ours"], results["theirs"], strict=True)
    ]
    ratio = {key: means["ours"][key] / means["theirs"][key] for key in means["ours"]}
    print(
        f"   RATIO ours / theirs (reference), geometric mean over seeds: validation perplexity "
        f"{ratio['joint']:.3f} (target <= 1.05; forward {ratio['forward']:.3f}, "
        f"backward {ratio['backward']:.3f}; per seed {', '.join(per_seed)})"
    )
    for side, other in (("ours", "theirs_our_cnn"), ("ours_from_end", "ours")):
        mine, theirs = results[side][0], results[other][0]
        ratios = {key: mine[key] / theirs[key] for key in ("joint", "forward", "backward")}
        print(
            f"   ratio {NAMES[side]} / {NAMES[other]}, seed {seeds[0]}: validation perplexity "
            f"{ratios['joint']:.3f} (forward {ratios['forward']:.3f}, "
            f"backward {ratios['backward']:.3f})"
        )
    print(
        f"   at these sizes (seed {seeds[0]}): training tokens/s ours/theirs "
        f"{rates['ours'] / rates['theirs']:.2f}x, contextualizer alone "
        f"(batch {args.quality_batch_size} x {timesteps}, forward+backward) "
        f"theirs/ours {alone['theirs'] / alone['ours']:.2f}x"
    )
    return {
        "quality_steps": args.quality_steps,
        "quality_seeds": args.quality_seeds,
        "quality_ours_perplexity": round(means["ours"]["joint"], 2),
        "quality_theirs_perplexity": round(means["theirs"]["joint"], 2),
        "quality_ratio_ours_theirs": round(ratio["joint"], 3),
    }


DECLARATION = Declaration(
    quick="--speed-steps 2 --speed-rounds 1 --quality-steps 8 --quality-seeds 1".split(),
    data=(WIKITEXT,),
)


def main(argv: list[str]) -> dict[str, Any]:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--speed-config", default="elmo_transformer_original.jsonnet")
    parser.add_argument("--speed-batch-size", type=int, default=16)
    parser.add_argument("--speed-steps", type=int, default=4)
    parser.add_argument("--speed-rounds", type=int, default=3)
    parser.add_argument("--quality-config", default="elmo_transformer.jsonnet")
    parser.add_argument("--quality-batch-size", type=int, default=32)
    parser.add_argument("--quality-steps", type=int, default=120)
    parser.add_argument(
        "--quality-seeds", type=int, default=3, help="seeds for ours and theirs in the quality part"
    )
    parser.add_argument("--skip-speed", action="store_true")
    parser.add_argument("--skip-quality", action="store_true")
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch threads, the same for both sides (default 1: on cores shared with other work, "
        "2 OpenMP threads made both sides several times slower and the timings erratic)",
    )
    parser.add_argument("--cuda-device", type=int, default=-1)
    parser.add_argument("--out", default=None, help="working folder (default: a new temporary one)")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)

    out = Path(args.out or tempfile.mkdtemp(prefix="transformer_benchmark_"))
    out.mkdir(parents=True, exist_ok=True)
    with quiet(out / "progress.log"):  # also catches progress bars closed after their run
        return run(args, out)


def run(args, out: Path) -> dict[str, Any]:
    train, valid, split = split_wikitext(out)
    device = (
        f"cuda:{args.cuda_device}"
        if args.cuda_device >= 0
        else f"CPU, {torch.get_num_threads()} torch threads"
    )
    print(f"split: {split}")
    print(f"device: {device}; working folder {out} (progress bars and logs in its *.log files)")
    print(
        "all sides: same windows, vocabulary, softmax, optimizer settings, batches, seeds, "
        "through allennlp's TrainModel/GradientDescentTrainer.\n"
        "ours = elmo_bilm + elmo_char_cnn + elmo_transformer (attention_dropout 0) + fused_adam; "
        "theirs (reference) = language_model + character_encoding/cnn-highway + "
        "bidirectional_language_model_transformer (also dropout 0.1 on attention weights) + adam, "
        "as allennlp-models' bidirectional_language_model.jsonnet; "
        "theirs + our CNN/optimizer = theirs with elmo_char_cnn and fused_adam"
    )
    figures: dict[str, Any] = {"headline": [], "device": device}
    if not args.skip_speed:
        figures.update(speed_part(args, train, out))
        figures["headline"].append("speed_ratio_ours_theirs")
    if not args.skip_quality:
        figures.update(quality_part(args, train, valid, out))
        figures["headline"].append("quality_ratio_ours_theirs")
    gc.collect()  # closes finished loaders' progress bars while their output still goes to the log
    return figures


if __name__ == "__main__":
    run_benchmark(NAME, main)
