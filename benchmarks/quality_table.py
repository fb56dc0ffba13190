"""One quality table (issue 14): biLMs pretrained on the same text with the same token budget,
then used by the same downstream models, everything through the real `allennlp` CLI.

Rows: our LSTM stateless (elmo_lstm.jsonnet), our LSTM stateful (elmo_lstm_stateful.jsonnet,
bilm-tf's regime), our transformer (elmo_transformer.jsonnet), allennlp-models' transformer
language model (its `language_model` + `bidirectional_language_model_transformer` at the demo
width, our reader and character CNN, as benchmarks/lstm_vs_allennlp_models_transformer.py) used
downstream through allennlp-models' `bidirectional_lm_token_embedder`, and no ELMo.
Columns, mean +- sd over the seeds: held-out perplexity in the row's own evaluation mode
(`allennlp evaluate` with the archive's config: streamed with state for the stateful row) and
stateless for all (elmo_lstm.jsonnet's reader and padded bucketed windows of 40 tokens),
pretraining tokens/s (training tokens / allennlp's training_duration), UPOS accuracy of
pos_tagger_elmo.jsonnet's `crf_tagger` and LAS of dependency_parser_elmo.jsonnet.

Data: $ELMO_PLUGIN_DATA/wikitext-2/valid.txt, first 90% of lines pretraining, last 10% held out
(line order kept); ud-english-ewt/en_ewt-ud-dev.conllu, sentences 1-1,600 train the downstream
models (fixed epochs, no early stopping), the rest is the test set.

Usage (from the repo root):
    python -m benchmarks.quality_table [--token-budget 2_000_000] [--seeds 3] [--tagger-epochs 10]
        [--parser-epochs 10] [--rows lstm_stateless,lstm_stateful,...] [--out DIR] [--quick]
`--quick`: 1 seed, 300 pretraining lines, one epoch of everything (minutes; rough numbers).
The token budget is rounded to whole epochs of the pretraining text (at least one).
Prints the table, then ends with one JSON line (benchmarks/common.py): every row's measurements
per seed (`results`) and the issue's targets (`targets`; a `missed` key and exit status 1 when
one is missed).
"""

import argparse
import json
import math
import statistics
import tempfile
from pathlib import Path
from typing import Any, Optional

from benchmarks.common import CONFIG_DIR, require_data, run_benchmark, shared_data_dir
from benchmarks.lstm_vs_allennlp_models_transformer import THEIR_CONTEXTUALIZER
from benchmarks.pos_tagger_elmo_vs_baseline import allennlp, split_conllu
from benchmarks.wikitext_data import split_train_valid, wikitext_file

NAME = "quality_table"
ROWS = ["lstm_stateless", "lstm_stateful", "transformer", "allennlp_models_transformer", "no_elmo"]
PRETRAIN_CONFIGS = {
    "lstm_stateless": "elmo_lstm.jsonnet",
    "lstm_stateful": "elmo_lstm_stateful.jsonnet",
    "transformer": "elmo_transformer.jsonnet",
    "allennlp_models_transformer": "elmo_lstm.jsonnet",  # its model replaced, see their_config
}
WORD_DIM, POS_DIM = 32, 16


def params_dict(config: str) -> dict:
    from allennlp.common import Params

    return Params.from_file(str(CONFIG_DIR / config)).as_dict()


def their_config() -> dict:
    """elmo_lstm.jsonnet with allennlp-models' bidirectional transformer language model."""
    config = params_dict("elmo_lstm.jsonnet")
    config["model"].update(
        type="language_model", bidirectional=True, contextualizer=THEIR_CONTEXTUALIZER
    )
    return config


def corpus_tokens(path: Path) -> int:
    """Tokens the demo reader makes of `path`, <S> and </S> included."""
    from allennlp.common import Params
    from allennlp.data import DatasetReader

    import elmo_plugin  # noqa: F401

    reader = DatasetReader.from_params(Params(params_dict("elmo_lstm.jsonnet")["dataset_reader"]))
    tokens = 0
    for instance in reader.read(str(path)):
        source: Any = instance["source"]
        tokens += len(source.tokens)
    return tokens


def seeds(seed: int) -> dict:
    return {"random_seed": seed, "numpy_seed": seed, "pytorch_seed": seed}


def pretrain(row: str, seed: int, data: dict, epochs: int, out: Path) -> dict[str, Any]:
    """Trains one biLM; -> its archive, tokens/s and both perplexities."""
    values = {
        "train_data_path": str(data["train"]),
        "validation_data_path": str(data["valid"]),
        "trainer.num_epochs": epochs,
        **seeds(seed),
    }
    config = str(CONFIG_DIR / PRETRAIN_CONFIGS[row])
    if row == "allennlp_models_transformer":
        config = str(out.parent / f"{out.name}_config.json")
        Path(config).write_text(json.dumps(their_config()))
    allennlp(
        ["train", config, "-s", str(out), "-o", json.dumps(values)],
        out.parent / f"{out.name}_train.log",
    )
    metrics = json.loads((out / "metrics.json").read_text())
    seconds = sum(
        float(x) * 60**i for i, x in enumerate(reversed(metrics["training_duration"].split(":")))
    )
    archive = out / "model.tar.gz"
    evaluated = out / "evaluate_own.json"
    allennlp(
        ["evaluate", str(archive), str(data["valid"]), "--output-file", str(evaluated)],
        out / "evaluate_own.log",
    )
    return {
        "archive": str(archive),
        "tokens_per_second": epochs * data["train_tokens"] / seconds,
        "perplexity_own": json.loads(evaluated.read_text())["perplexity"],
        "perplexity_stateless": stateless_perplexity(archive, data["valid"]),
    }


def stateless_perplexity(archive: Path, valid: Path) -> float:
    """Token-weighted perplexity of `archive` on `valid` read as elmo_lstm.jsonnet reads it
    (padded windows of 40 tokens, each from zero state), for every kind of biLM."""
    import torch
    from allennlp.common import Params
    from allennlp.data import DatasetReader
    from allennlp.data.data_loaders import MultiProcessDataLoader
    from allennlp.models.archival import load_archive

    import elmo_plugin  # noqa: F401

    model = load_archive(str(archive)).model.eval()
    config = params_dict("elmo_lstm.jsonnet")
    reader = DatasetReader.from_params(Params(config["dataset_reader"]))
    loader = MultiProcessDataLoader(reader, str(valid), batch_size=32)
    loader.index_with(model.vocab)
    nll = targets = 0.0
    with torch.no_grad():
        for batch in loader:
            output = model(source=batch["source"])  # no backward_source: the stateless path
            count = float(output.get("batch_weight", 0.0))
            nll += 0.5 * (float(output["forward_loss"]) + float(output["backward_loss"])) * count
            targets += count
    return math.exp(nll / targets)


def downstream(
    config: str,
    name: str,
    values: dict,
    epochs: int,
    bilm: Optional[dict],
    row: str,
    test: Path,
    out: Path,
    metric: str,
) -> float:
    """Trains one downstream config for `epochs` epochs, its ELMo embedder given the row's biLM
    (allennlp-models' embedder for their archive) or removed (no ELMo: otherwise the same
    model); -> its test `metric`."""
    params = params_dict(config)
    embedders = params["model"]["text_field_embedder"]["token_embedders"]
    encoder = params["model"]["encoder"]
    extra = POS_DIM if "pos_tag_embedding" in params["model"] else 0
    if bilm is None:
        del embedders["elmo"]
        del params["dataset_reader"]["token_indexers"]["elmo"]
        encoder["input_size"] = WORD_DIM + extra
    else:
        from elmo_plugin.archives.bilm_archive import configured_architecture

        width = 2 * configured_architecture(bilm["archive"])["contextualizer"]["input_dim"]
        encoder["input_size"] = width + WORD_DIM + extra
        if row == "allennlp_models_transformer":
            embedders["elmo"] = {
                "type": "bidirectional_lm_token_embedder",
                "archive_file": bilm["archive"],
                "dropout": embedders["elmo"].get("dropout"),
                "requires_grad": False,
                "bos_eos_tokens": ["<S>", "</S>"],
                "remove_bos_eos": True,
            }
        else:
            embedders["elmo"]["pretrained_file"] = bilm["archive"]
    params.update(values)
    params["trainer"].update(num_epochs=epochs, patience=None)
    path = out / f"{name}_config.json"
    path.write_text(json.dumps(params))
    allennlp(
        ["train", str(path), "-s", str(out / name), "--include-package", "allennlp_models"],
        out / f"{name}_train.log",
    )
    result = out / f"{name}_test.json"
    allennlp(
        [
            "evaluate",
            str(out / name / "model.tar.gz"),
            str(test),
            "--output-file",
            str(result),
            "--include-package",
            "allennlp_models",
        ],
        out / f"{name}_evaluate.log",
    )
    return json.loads(result.read_text())[metric]


def mean_sd(values: list[float], digits: int) -> str:
    if not values:
        return "-"
    return f"{statistics.mean(values):.{digits}f} +- {stdev(values):.{digits}f}"


def main(argv: list[str]) -> dict[str, Any]:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--token-budget", type=int, default=2_000_000, help="pretraining tokens per biLM"
    )
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--tagger-epochs", type=int, default=10)
    parser.add_argument("--parser-epochs", type=int, default=10)
    parser.add_argument("--rows", default=",".join(ROWS))
    parser.add_argument(
        "--out", help="folder for data, archives and logs (default: a new temporary folder)"
    )
    parser.add_argument(
        "--quick", action="store_true", help="1 seed, 300 pretraining lines, 1 epoch of everything"
    )
    args = parser.parse_args(argv)
    rows = args.rows.split(",")
    if unknown := set(rows) - set(ROWS):
        parser.error(f"--rows: unknown {sorted(unknown)}; choose from {ROWS}")

    wikitext, ewt = wikitext_file(), shared_data_dir() / "ud-english-ewt" / "en_ewt-ud-dev.conllu"
    require_data(wikitext, ewt)
    out = Path(args.out or tempfile.mkdtemp(prefix="quality_table_")).resolve()
    out.mkdir(parents=True, exist_ok=True)
    print(f"outputs and logs: {out}")

    lines = wikitext.read_text(encoding="utf-8").splitlines()
    train_lines, valid_lines = split_train_valid(lines[:330] if args.quick else lines)
    data: dict[str, Any] = {"train": out / "wiki_train.txt", "valid": out / "wiki_valid.txt"}
    data["train"].write_text("\n".join(train_lines) + "\n", encoding="utf-8")
    data["valid"].write_text("\n".join(valid_lines) + "\n", encoding="utf-8")
    data["train_tokens"] = corpus_tokens(data["train"])
    epochs = 1 if args.quick else max(1, round(args.token_budget / data["train_tokens"]))
    seed_count = 1 if args.quick else args.seeds
    tagger_epochs, parser_epochs = (
        (1, 1) if args.quick else (args.tagger_epochs, args.parser_epochs)
    )
    train, test, test_sentences = split_conllu(ewt, out)
    print(
        f"pretraining: {wikitext} first 90% of lines ({data['train_tokens']} tokens), "
        f"{epochs} epochs = {epochs * data['train_tokens']} tokens per biLM; "
        f"held out: last 10%; downstream: {ewt} sentences 1-1600 train, {test_sentences} test; "
        f"{seed_count} seeds; tagger {tagger_epochs} / parser {parser_epochs} epochs"
    )

    results: dict[str, dict[str, list[float]]] = {row: {} for row in rows}
    for row in rows:
        for seed in range(seed_count):
            folder = out / f"{row}_seed{seed}"
            folder.mkdir(exist_ok=True)
            bilm = None if row == "no_elmo" else pretrain(row, seed, data, epochs, folder / "bilm")
            common = {"train_data_path": str(train), "validation_data_path": None, **seeds(seed)}
            measured = {} if bilm is None else {k: v for k, v in bilm.items() if k != "archive"}
            measured["upos"] = downstream(
                "pos_tagger_elmo.jsonnet",
                "tagger",
                common,
                tagger_epochs,
                bilm,
                row,
                test,
                folder,
                "accuracy",
            )
            measured["las"] = downstream(
                "dependency_parser_elmo.jsonnet",
                "parser",
                common,
                parser_epochs,
                bilm,
                row,
                test,
                folder,
                "LAS",
            )
            for key, value in measured.items():
                results[row].setdefault(key, []).append(value)
            print(json.dumps({"row": row, "seed": seed, **measured}), flush=True)

    columns: list[tuple] = [
        ("perplexity_own", "held-out ppl (own mode)", 1),
        ("perplexity_stateless", "held-out ppl (stateless)", 1),
        ("tokens_per_second", "pretraining tokens/s", 0),
        ("upos", "UPOS accuracy", 4),
        ("las", "LAS", 4),
    ]
    print("\n| row | " + " | ".join(title for _, title, _ in columns) + " |")
    print("| --- |" + " --- |" * len(columns))
    for row in rows:
        print(
            f"| {row} | "
            + " | ".join(mean_sd(results[row].get(key, []), digits) for key, _, digits in columns)
            + " |"
        )
    targets = issue_targets(results)
    figures: dict[str, Any] = {
        "headline": ["targets"],
        "seeds": seed_count,
        "results": results,
        "targets": targets,
    }
    missed = [key for key, value in targets.items() if value is False]
    if missed:
        figures["missed"] = f"targets {', '.join(missed)}"
    return figures


def issue_targets(results: dict[str, dict[str, list[float]]]) -> dict[str, object]:
    """The issue's targets as ratios / margins (False: missed): stateful below stateless held-out
    perplexity (each in its own mode), and our best row above allennlp-models' transformer on
    UPOS and LAS by more than one sd (the larger of the two)."""
    targets: dict[str, object] = {}
    if "lstm_stateless" in results and "lstm_stateful" in results:
        ratio = statistics.mean(results["lstm_stateful"]["perplexity_own"]) / statistics.mean(
            results["lstm_stateless"]["perplexity_own"]
        )
        targets["stateful_over_stateless_perplexity"] = round(ratio, 4)
        targets["stateful_lower_perplexity"] = ratio < 1
    theirs = results.get("allennlp_models_transformer")
    ours = [row for row in ("lstm_stateless", "lstm_stateful", "transformer") if row in results]
    if theirs and ours:
        for key in ("upos", "las"):
            best = max(ours, key=lambda row: statistics.mean(results[row][key]))
            margin = statistics.mean(results[best][key]) - statistics.mean(theirs[key])
            spread = max(stdev(results[best][key]), stdev(theirs[key]))
            targets[f"{key}_best_row"] = best
            targets[f"{key}_best_minus_allennlp_models"] = round(margin, 4)
            targets[f"{key}_beyond_one_sd"] = margin > spread
    return targets


def stdev(values: list[float]) -> float:
    return statistics.stdev(values) if len(values) > 1 else 0.0


if __name__ == "__main__":
    run_benchmark(NAME, main)
