"""UPOS accuracy on real data: allennlp-models' `crf_tagger` fed by our ELMo
(training_config/pos_tagger_elmo.jsonnet) vs the same tagger without it
(pos_tagger_baseline.jsonnet), everything through the real `allennlp train` / `evaluate` CLI.

1. Pretrain the demo-size LSTM ELMo (training_config/elmo_lstm.jsonnet as it is) on
   $ELMO_PLUGIN_DATA/wikitext-2/valid.txt: first 90% of lines for training, last 10% validation.
2. Split ud-english-ewt/en_ewt-ud-dev.conllu: the first 1,600 sentences train both taggers
   (same epochs, no early stopping: no validation set), the remaining sentences are the test set.
3. Print both test accuracies (and on test tokens unseen in the tagger's training data), and
   the ELMo tagger's learned layer mix: softmax(s) and gamma; end with them as one JSON line
   (benchmarks/support/common.py). A `missed` key and exit status 1 if ELMo is not better.

Usage (from the repo root):
    python -m benchmarks.pos_tagger_elmo_vs_baseline [--out DIR] [--bilm ARCHIVE]
        [--tagger-epochs 10]
$ELMO_PLUGIN_DATA defaults to ../shared/data; without the data the benchmark is skipped.
Set OMP_NUM_THREADS=1 on a machine whose cores are busy with other work.
"""

import json
import tempfile
import warnings
from pathlib import Path
from typing import Any

from benchmarks.support.child import Child
from benchmarks.support.common import (
    CONFIG_DIR,
    REPO_ROOT,
    Declaration,
    allennlp_command,
    benchmark_parser,
    config_dict,
    require_data,
    run_benchmark,
    shared_data_dir,
)
from benchmarks.support.wikitext_data import EWT, WIKITEXT, wikitext_file, write_train_valid

NAME = "pos_tagger_elmo_vs_baseline"
TRAIN_SENTENCES = 1600


def allennlp(args: list[str], log: Path) -> float:
    """Runs `allennlp ARGS --include-package elmo_plugin`, output to `log`; returns the seconds
    taken."""
    return Child(allennlp_command(*args), log).check().wall_s


def conllu_blocks(path: Path) -> list[str]:
    """A CoNLL-U file's sentences, each its block of lines."""
    return [b.strip("\n") for b in path.read_text(encoding="utf-8").split("\n\n") if b.strip()]


def write_conllu(path: Path, blocks: list[str]) -> Path:
    path.write_text("".join(b + "\n\n" for b in blocks), encoding="utf-8")
    return path


def split_conllu(source: Path, out: Path) -> tuple[Path, Path, int]:
    blocks = conllu_blocks(source)
    train = write_conllu(out / "ewt_train.conllu", blocks[:TRAIN_SENTENCES])
    test = write_conllu(out / "ewt_test.conllu", blocks[TRAIN_SENTENCES:])
    return train, test, len(blocks) - TRAIN_SENTENCES


def words_and_tags(path: Path) -> list[tuple[list[str], list[str]]]:
    from conllu import parse_incr

    with open(path, encoding="utf-8") as conllu:
        return [
            (
                [w["form"] for w in s if isinstance(w["id"], int)],
                [w["upos"] for w in s if isinstance(w["id"], int)],
            )
            for s in parse_incr(conllu)
        ]


def oov_accuracy(
    archive: Path, test: Path, seen: set[str], out: Path, name: str
) -> tuple[float, int]:
    """Accuracy on test tokens whose lowercased form never occurs in the training data, from
    `allennlp predict --predictor whitespace_tagger`."""
    gold = words_and_tags(test)
    inputs = out / "test_tokens.jsonl"
    inputs.write_text(
        "".join(json.dumps({"tokens": words}) + "\n" for words, _ in gold), encoding="utf-8"
    )
    predicted = out / f"{name}_predictions.jsonl"
    allennlp(
        [
            "predict",
            str(archive),
            str(inputs),
            "--predictor",
            "whitespace_tagger",
            "--output-file",
            str(predicted),
            "--batch-size",
            "32",
            "--silent",
        ],
        out / f"{name}_predict.log",
    )
    correct = total = 0
    lines = predicted.read_text(encoding="utf-8").splitlines()
    for (words, tags), line in zip(gold, lines, strict=False):
        for word, tag, guess in zip(words, tags, json.loads(line)["tags"], strict=False):
            if word.lower() not in seen:
                total += 1
                correct += tag == guess
    return correct / max(total, 1), total


def layer_mix(archive: Path) -> dict[str, object]:
    warnings.simplefilter("ignore")  # deprecation noise from allennlp's dependencies
    import allennlp_models.tagging  # noqa: F401
    import torch
    from allennlp.models.archival import load_archive

    import elmo_plugin  # noqa: F401

    parameters = dict(load_archive(str(archive)).model.named_parameters())
    scalars: list[torch.Tensor] = [
        v for n, v in sorted(parameters.items()) if "scalar_mix.scalar_parameters" in n
    ]
    gamma = next(v for n, v in parameters.items() if n.endswith("scalar_mix.gamma"))
    return {
        "softmax(s)": [round(w, 4) for w in torch.softmax(torch.cat(scalars), 0).tolist()],
        "s": [round(s.item(), 4) for s in scalars],
        "gamma": round(gamma.item(), 4),
    }


def tagger_input_size(bilm: Path) -> int:
    """The ELMo tagger's encoder input: the biLM's width (2 x its projection) + the word
    embedding."""
    from elmo_plugin.archives.bilm_source import load_bilm_encoder

    model = config_dict(CONFIG_DIR / "pos_tagger_elmo.jsonnet")["model"]
    word_dim = model["text_field_embedder"]["token_embedders"]["tokens"]["embedding_dim"]
    return load_bilm_encoder(str(bilm)).get_output_dim() + word_dim


# a tiny biLM archive for run_all: the tagger comparison in minutes, its figures meaningless
TINY_BILM = REPO_ROOT / "fixtures" / "archives_before_layering" / "bilm_lstm.tar.gz"
DECLARATION = Declaration(
    quick=["--bilm", str(TINY_BILM), "--tagger-epochs", "1"],
    data=(WIKITEXT, EWT),
)


def main(argv: list[str]) -> dict[str, Any]:
    parser = benchmark_parser(__doc__)
    parser.add_argument(
        "--out", help="folder for splits, archives and logs (default: a new temporary folder)"
    )
    parser.add_argument("--bilm", help="a biLM model.tar.gz to use instead of pretraining one")
    parser.add_argument("--tagger-epochs", type=int, default=10)
    args = parser.parse_args(argv)

    wikitext, ewt = wikitext_file(), shared_data_dir() / EWT
    require_data(wikitext, ewt)
    figures: dict[str, Any] = {
        "headline": ["elmo_minus_baseline_points", "error_rate_ratio"],
        "tagger_epochs": args.tagger_epochs,
    }
    out = Path(args.out or tempfile.mkdtemp(prefix="pos_elmo_vs_baseline_")).resolve()
    out.mkdir(parents=True, exist_ok=True)
    print(f"outputs and logs: {out}")

    bilm = Path(args.bilm).resolve() if args.bilm else out / "bilm" / "model.tar.gz"
    if not args.bilm:
        wiki_train, wiki_valid = out / "wiki_train.txt", out / "wiki_valid.txt"
        write_train_valid(wikitext, wiki_train, wiki_valid)
        seconds = allennlp(
            [
                "train",
                str(CONFIG_DIR / "elmo_lstm.jsonnet"),
                "-s",
                str(out / "bilm"),
                "-o",
                json.dumps(
                    {"train_data_path": str(wiki_train), "validation_data_path": str(wiki_valid)}
                ),
            ],
            out / "bilm.log",
        )
        metrics = json.loads((out / "bilm" / "metrics.json").read_text())
        print(
            f"biLM: demo-size elmo_lstm.jsonnet on {wikitext} "
            f"(first 90% of lines / last 10% validation), "
            f"{metrics['epoch'] + 1} epochs in {seconds / 60:.1f} min, validation perplexity "
            f"{metrics['best_validation_perplexity']:.1f} "
            f"(forward {metrics['best_validation_forward_perplexity']:.1f}, "
            f"backward {metrics['best_validation_backward_perplexity']:.1f})"
        )
        figures["bilm_validation_perplexity"] = round(metrics["best_validation_perplexity"], 1)

    train, test, test_sentences = split_conllu(ewt, out)
    seen = {word.lower() for words, _ in words_and_tags(train) for word in words}
    print(
        f"tagging data: {ewt}: first {TRAIN_SENTENCES} sentences train, "
        f"the other {test_sentences} test; {args.tagger_epochs} epochs each, no early stopping"
    )
    common = {
        "train_data_path": str(train),
        "validation_data_path": None,
        "trainer.num_epochs": args.tagger_epochs,
        "trainer.patience": None,
    }
    results = {}
    for name, config, extra in [
        ("baseline", "pos_tagger_baseline.jsonnet", {}),
        (
            "elmo",
            "pos_tagger_elmo.jsonnet",
            {
                "model.text_field_embedder.token_embedders.elmo.pretrained_file": str(bilm),
                "model.encoder.input_size": tagger_input_size(bilm),
            },
        ),
    ]:
        seconds = allennlp(
            [
                "train",
                str(CONFIG_DIR / config),
                "-s",
                str(out / name),
                "-o",
                json.dumps({**common, **extra}),
            ],
            out / f"{name}_train.log",
        )
        allennlp(
            [
                "evaluate",
                str(out / name / "model.tar.gz"),
                str(test),
                "--output-file",
                str(out / f"{name}_test.json"),
            ],
            out / f"{name}_evaluate.log",
        )
        accuracy = json.loads((out / f"{name}_test.json").read_text())["accuracy"]
        unseen, unseen_tokens = oov_accuracy(out / name / "model.tar.gz", test, seen, out, name)
        results[name] = accuracy
        figures[f"{name}_accuracy"] = round(accuracy, 4)
        figures[f"{name}_unseen_accuracy"] = round(unseen, 4)
        print(
            f"{name:9s} ({config}): test UPOS accuracy {accuracy:.4f}; "
            f"on the {unseen_tokens} test tokens unseen in training {unseen:.4f}; "
            f"trained in {seconds / 60:.1f} min"
        )
    mix = layer_mix(out / "elmo" / "model.tar.gz")
    print(f"learned ELMo layer mix (layer 0 = char CNN, 1-2 = LSTM layers): {mix}")
    gain = results["elmo"] - results["baseline"]
    figures["elmo_layer_mix"] = mix
    figures["elmo_minus_baseline_points"] = round(gain * 100, 2)
    figures["error_rate_ratio"] = round((1 - results["elmo"]) / (1 - results["baseline"]), 2)
    if gain <= 0:
        figures["missed"] = "the ELMo tagger is not more accurate than the baseline"
    return figures


if __name__ == "__main__":
    run_benchmark(NAME, main)
