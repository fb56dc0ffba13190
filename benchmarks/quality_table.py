"""Does pretraining pay off? One table of what a user would choose between, every row trained
to convergence on the same text and used by the same downstream models, and a label-efficiency
curve; everything trained and evaluated through the real `allennlp` CLI.

Rows: our LSTM biLM stateless (elmo_lstm.jsonnet) and stateful (elmo_lstm_stateful.jsonnet,
bilm-tf's regime), our transformer (elmo_transformer.jsonnet). Then allennlp-models' transformer
language model (its `language_model` + `bidirectional_language_model_transformer` at the demo
width; our reader and character CNN). Then a small BERT (benchmarks/support/bert_mlm.py: a
WordPiece vocabulary from `tokenizers`, `transformers`' masked-LM objective) used through
allennlp's `pretrained_transformer_mismatched` embedder two ways. `bert_mlm_frozen`: frozen, a
learned mix of its layers, computed once per sentence. `bert_mlm_finetuned`: fine-tuned, its
last layer, Adam at `BERT_FINETUNE_LR`. Then static fastText vectors trained on the same text
(gensim), fed to the same models as frozen pretrained word embeddings, and no pretraining.

allennlp-models' transformer returns its intermediate layers without its final layer norm (the
residual stream: root mean square 4 to 15 against about 1 for the character layer and the top
layer). And allennlp-models' `bidirectional_lm_token_embedder` mixes the layers without
normalizing them: the mix is dominated by those layers and the tagger learns next to nothing.
`--allennlp-models-embedder normalized` (the default) reads its archive with our
`elmo_bilm_embedder` and `do_layer_norm: true`; `documented` uses allennlp-models' embedder as
its docs say.

Data ($ELMO_PLUGIN_DATA): wikitext-2/valid.txt, lines in order. The first 90% pretrain, the
next 5% stop pretraining (validation perplexity), the last 5% are held out (the perplexity in the
table). In ud-english-ewt/en_ewt-ud-dev.conllu sentences 1-1,200 train the downstream models,
1,201-1,600 stop their training (validation), 1,601-2,001 are the test set, used for nothing
else. The curve trains the tagger on the first 200 / 400 / 800 / all 1,200 training sentences.

Convergence: each biLM (the BERT: its validation masked-LM loss) trains until its validation
perplexity has not improved for
`--pretrain-patience` epochs, at most `--pretrain-epochs`. Each tagger (UPOS, the `crf_tagger` of
pos_tagger_elmo.jsonnet) and parser (LAS, dependency_parser_elmo.jsonnet) until its validation
accuracy / LAS has not improved for `--patience` epochs, at most `--max-epochs`.
`DOWNSTREAM_TRAINING` (the parser's batch size, a rate halved on a plateau) is set over the
shipped configs so that they converge before the cap. The test figures are the best validation
epoch's. One pretraining seed per row; `--seeds` downstream
seeds per row (mean +- sd). Every biLM is frozen downstream; our biLMs' layers for the EWT
sentences are computed once per biLM (`allennlp elmo-embed`) and read through
`elmo_bilm_embedder`'s `precomputed_layers`. Each pretrained LM row is compared with the BERT
rows, static vectors and no pretraining by a paired t-test over the downstream seeds
(`paired_comparisons`).

Budget: `--workers` stages side by side, each on one thread; finished stages are kept in
`--out` (a rerun continues). `--quick`: a small run for checking the pipeline (minutes; rough
numbers). Prints a line per finished stage, the table, the curve (PNG in --out), and ends with
one JSON line (benchmarks/support/common.py).

Rows one at a time: `--results DIR` writes each row's results (its pretraining, its table and
curve runs, the settings they were made with) to DIR/ROW.json once its stages finish.
`--from-results DIR` trains nothing and builds the table, curve and comparisons from those
files, refusing a missing file or one made with other settings (budget, `PROTOCOL`, the data
files, the configs). A biLM or BERT row run alone trains the curve's runs as the best of its
kind, named by itself; the build uses those of the row with the best validation UPOS among the
files. The two BERT rows share one pretraining when run with the same `--out`.

Usage (from the repo root):
    python -m benchmarks.quality_table --out DIR [--quick] [--seeds 3] [--workers 2]
        [--pretrain-epochs 10] [--pretrain-patience 1] [--max-epochs 40] [--patience 5]
        [--rows lstm_stateless,...] [--results DIR | --from-results DIR]
"""

import argparse
import hashlib
import json
import math
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from benchmarks.lstm_vs_allennlp_models_transformer import their_model_config
from benchmarks.pos_tagger_elmo_vs_baseline import conllu_blocks, words_and_tags, write_conllu
from benchmarks.support.child import one_thread
from benchmarks.support.common import (
    CONFIG_DIR,
    Declaration,
    allennlp_command,
    benchmark_parser,
    config_dict,
    require_data,
    run_benchmark,
    shared_data_dir,
)
from benchmarks.support.stages import (
    Result,
    Stage,
    keep_settings,
    run_stages,
    write_atomically,
)
from benchmarks.support.wikitext_data import EWT, WIKITEXT, wikitext_file

NAME = "quality_table"
BILM_CONFIGS = {
    "lstm_stateless": "elmo_lstm.jsonnet",
    "lstm_stateful": "elmo_lstm_stateful.jsonnet",
    "transformer": "elmo_transformer.jsonnet",
    "allennlp_models_transformer": "elmo_lstm.jsonnet",  # its model replaced: their_config
}
BERT_ROWS = ("bert_mlm_frozen", "bert_mlm_finetuned")  # one BERT, used two ways
ROWS = [*BILM_CONFIGS, *BERT_ROWS, "static_vectors", "no_pretraining"]
TASKS = {  # task -> (config, metric in allennlp's metrics)
    "upos": ("pos_tagger_elmo.jsonnet", "accuracy"),
    "las": ("dependency_parser_elmo.jsonnet", "LAS"),
}
WORD_DIM, POS_DIM = 32, 16
STATIC_NAMESPACE = "static_vectors"
TRAIN_SENTENCES = 1200  # EWT sentences 1-1,200 train the downstream models
EWT_SPLITS = {
    "train": (0, TRAIN_SENTENCES),
    "validation": (TRAIN_SENTENCES, 1600),
    "test": (1600, None),
}
CURVE_ROWS = ["best_bilm", "best_bert", "static_vectors", "no_pretraining"]
BEST_OF = {"best_bilm": tuple(BILM_CONFIGS), "best_bert": BERT_ROWS}  # by validation UPOS
PROTOCOL = 3  # raise it when a change here alters what a row's runs measure
DOWNSTREAM_TRAINING: dict[str, Any] = {  # over the shipped configs, chosen on validation
    "batch_size": {"upos": 32, "las": 8},
    "learning_rate_scheduler": {  # every rate halved after 2 epochs without improvement
        "type": "reduce_on_plateau",
        "mode": "max",
        "factor": 0.5,
        "patience": 1,
    },
}
PATHS = ("archive", "vectors", "model", "layers")  # stage results' files: not kept in results
BERT_FINETUNE_LR = 1e-4  # Adam; the downstream model's own layers keep the config's rate
PACKAGES = (  # what downstream `allennlp` runs import (elmo_plugin: the BERT's tokenizer too)
    "elmo_plugin",
    "allennlp_models",
    "benchmarks.support.frozen_transformer_layers",
)


@dataclass
class Budget:
    wiki_lines: Optional[int]  # the first lines of WikiText-2 used (None: all)
    train_sentences: int  # EWT training sentences of the main table (at most 1,200)
    curve_sizes: list[int]  # smaller training sets for the curve
    seeds: int
    pretrain_epochs: int
    pretrain_patience: int
    max_epochs: int
    patience: int
    fasttext_epochs: int = 20
    fasttext_dim: int = 100


QUICK = Budget(330, 400, [200], 1, 1, 1, 2, 1, fasttext_epochs=2)


def budget_from(args: argparse.Namespace) -> Budget:
    if args.quick:
        return QUICK
    epochs = (args.pretrain_epochs, args.pretrain_patience, args.max_epochs, args.patience)
    return Budget(None, TRAIN_SENTENCES, [200, 400, 800], args.seeds, *epochs)


def their_config() -> dict:
    """elmo_lstm.jsonnet with allennlp-models' bidirectional transformer language model."""
    return {**config_dict(CONFIG_DIR / "elmo_lstm.jsonnet"), "model": their_model_config()}


def seeds(seed: int) -> dict:
    return {"random_seed": seed, "numpy_seed": seed, "pytorch_seed": seed}


def allennlp(args: list[str], log: Path) -> Result:
    """`allennlp ARGS` with our plugin and allennlp-models, on one thread -> wall and CPU s."""
    return one_thread(allennlp_command(*args, packages=PACKAGES), log)


def only_process_settings(trainer: dict) -> None:
    """Keeps the first callback (the process settings) and drops the logging ones
    (TensorBoard, layer mix, in-epoch validation checks): they change no weight."""
    trainer["callbacks"] = [c for c in trainer["callbacks"] if c["type"] == "elmo_process_settings"]


# --- data ---------------------------------------------------------------------------------


def write_wikitext(source: Path, lines: Optional[int], out: Path) -> dict[str, Path]:
    """The first 90% of the lines -> train, the next 5% -> valid, the last 5% -> heldout."""
    text = source.read_text(encoding="utf-8").splitlines()[:lines]
    cuts = [0, len(text) * 90 // 100, len(text) * 95 // 100, len(text)]
    paths = {}
    for name, start, end in zip(("train", "valid", "heldout"), cuts, cuts[1:], strict=False):
        paths[name] = out / f"wiki_{name}.txt"
        paths[name].write_text("\n".join(text[start:end]) + "\n", encoding="utf-8")
    return paths


def write_ewt(source: Path, budget: Budget, out: Path) -> dict[str, Any]:
    """EWT_SPLITS of `source`, the training sets of the curve and every sentence's words (one
    line each, for elmo-embed) -> their paths and sentence counts."""
    blocks = conllu_blocks(source)
    splits = {name: blocks[start:end] for name, (start, end) in EWT_SPLITS.items()}
    if len(splits["test"]) == 0 or len(splits["train"]) < budget.train_sentences:
        raise ValueError(f"{source}: {len(blocks)} sentences, expected at least 1,601")
    sets = {
        "train": splits["train"][: budget.train_sentences],
        "validation": splits["validation"],
        "test": splits["test"],
        **{f"train_{size}": splits["train"][:size] for size in budget.curve_sizes},
    }
    paths: dict[str, Any] = {"counts": {name: len(sentences) for name, sentences in sets.items()}}
    for name, sentences in sets.items():
        paths[name] = write_conllu(out / f"ewt_{name}.conllu", sentences)
    everything = write_conllu(out / "ewt_all.conllu", blocks)
    paths["sentences"] = out / "ewt_sentences.txt"
    paths["sentences"].write_text(
        "".join(" ".join(words) + "\n" for words, _ in words_and_tags(everything)),
        encoding="utf-8",
    )
    return paths


# --- pretraining --------------------------------------------------------------------------


def pretrain(row: str, wiki: dict[str, Path], budget: Budget, folder: Path) -> Result:
    """Trains one biLM with early stopping; -> its archive, epochs, held-out perplexities and
    CPU time."""
    config = str(CONFIG_DIR / BILM_CONFIGS[row])
    if row == "allennlp_models_transformer":
        config = str(folder / "their_config.json")
        Path(config).write_text(json.dumps(their_config()))
    trainer = config_dict(CONFIG_DIR / BILM_CONFIGS[row])["trainer"]
    only_process_settings(trainer)
    values = {
        "train_data_path": str(wiki["train"]),
        "validation_data_path": str(wiki["valid"]),
        "trainer.num_epochs": budget.pretrain_epochs,
        "trainer.patience": budget.pretrain_patience,
        "trainer.callbacks": trainer["callbacks"],
        **seeds(0),
    }
    model = folder / "model"
    if model.exists():  # left by a run that stopped before this stage finished
        shutil.rmtree(model)
    cost = allennlp(
        ["train", config, "-s", str(model), "-o", json.dumps(values)], folder / "train.log"
    )
    metrics = json.loads((model / "metrics.json").read_text())
    archive = model / "model.tar.gz"
    evaluated = folder / "heldout.json"
    evaluation = allennlp(
        ["evaluate", str(archive), str(wiki["heldout"]), "--output-file", str(evaluated)],
        folder / "heldout.log",
    )
    start = time.thread_time()  # torch on one thread: this thread's time is the computation's
    stateless = stateless_perplexity(archive, wiki["heldout"])
    return {
        "archive": str(archive),
        "width": bilm_width(archive),
        "epochs_run": metrics["epoch"] + 1,
        "best_epoch": metrics["best_epoch"] + 1,
        "validation_perplexity": metrics["best_validation_perplexity"],
        "heldout_perplexity": json.loads(evaluated.read_text())["perplexity"],
        "heldout_perplexity_stateless": stateless,
        "pretrain_cpu_s": cost["cpu_s"],
        "pretrain_wall_s": cost["wall_s"],
        "cpu_s": round(cost["cpu_s"] + evaluation["cpu_s"] + time.thread_time() - start, 1),
    }


def pretrain_bert(wiki: dict[str, Path], budget: Budget, folder: Path) -> Result:
    """The BERT of the BERT rows (benchmarks/support/bert_mlm.py), stopped as the biLMs are."""
    command = [sys.executable, "-m", "benchmarks.support.bert_mlm", "--out", str(folder)]
    for name in ("train", "valid", "heldout"):
        command += [f"--{name}", str(wiki[name])]
    command += ["--epochs", str(budget.pretrain_epochs)]
    command += ["--patience", str(budget.pretrain_patience)]
    cost = one_thread(command, folder / "train.log")
    result = json.loads((folder / "result.json").read_text())
    return dict(result, pretrain_cpu_s=cost["cpu_s"], pretrain_wall_s=cost["wall_s"], **cost)


def bilm_width(archive: Path) -> int:
    from elmo_plugin.archives.bilm_source import load_bilm_encoder

    return load_bilm_encoder(str(archive)).get_output_dim()


def stateless_perplexity(archive: Path, text: Path) -> float:
    """Token-weighted perplexity of `archive` on `text` read as elmo_lstm.jsonnet reads it
    (padded windows of 40 tokens, each from zero state), for every kind of biLM."""
    import torch
    from allennlp.common import Params
    from allennlp.data import DatasetReader
    from allennlp.data.data_loaders import MultiProcessDataLoader
    from allennlp.models.archival import load_archive

    import elmo_plugin  # noqa: F401

    torch.set_num_threads(1)
    model = load_archive(str(archive)).model.eval()
    reader_params = config_dict(CONFIG_DIR / "elmo_lstm.jsonnet")["dataset_reader"]
    reader = DatasetReader.from_params(Params(reader_params))
    loader = MultiProcessDataLoader(reader, str(text), batch_size=32)
    loader.index_with(model.vocab)
    nll = targets = 0.0
    with torch.no_grad():
        for batch in loader:
            output = model(source=batch["source"])  # no backward_source: the stateless path
            count = float(output.get("batch_weight", 0.0))
            nll += 0.5 * (float(output["forward_loss"]) + float(output["backward_loss"])) * count
            targets += count
    return math.exp(nll / targets)


def embed_ewt(bilm: Result, sentences: Path, folder: Path) -> Result:
    """Every EWT sentence's biLM layers, once, for `precomputed_layers`."""
    layers = folder / "ewt_layers.hdf5"
    cost = allennlp(
        ["elmo-embed", bilm["archive"], str(sentences), str(layers)], folder / "elmo_embed.log"
    )
    return {"layers": str(layers), "cpu_s": cost["cpu_s"]}


def train_static_vectors(
    wiki: dict[str, Path], words: Path, budget: Budget, folder: Path
) -> Result:
    """fastText skip-gram vectors (gensim, one thread) trained on the pretraining text,
    lowercased as the downstream word indexers read it; written as a GloVe-style text file for
    every word of that text and of the EWT sentences (those from subwords)."""
    from gensim.models import FastText

    start = time.process_time()  # the process: gensim's threads (and any in-process stage beside)
    corpus = [
        line.lower().split() for line in wiki["train"].read_text(encoding="utf-8").splitlines()
    ]
    model = FastText(
        sentences=[tokens for tokens in corpus if tokens],
        vector_size=budget.fasttext_dim,
        window=5,
        min_count=2,  # as the biLMs' vocabulary
        sg=1,
        epochs=budget.fasttext_epochs,
        workers=1,
        seed=0,
    )
    vocabulary = list(model.wv.index_to_key)
    known = set(vocabulary)
    for line in words.read_text(encoding="utf-8").splitlines():
        for word in line.lower().split():
            if word not in known:
                known.add(word)
                vocabulary.append(word)
    vectors = folder / "fasttext_vectors.txt"
    with open(vectors, "w", encoding="utf-8") as out:
        for word in vocabulary:
            out.write(word + " " + " ".join(f"{x:.5f}" for x in model.wv[word]) + "\n")
    return {
        "vectors": str(vectors),
        "words": len(vocabulary),
        "trained_words": len(model.wv.index_to_key),
        "dim": budget.fasttext_dim,
        "epochs_run": budget.fasttext_epochs,
        "pretrain_cpu_s": round(time.process_time() - start, 1),
        "cpu_s": round(time.process_time() - start, 1),
    }


# --- downstream ---------------------------------------------------------------------------


def downstream_config(
    task: str, row: str, pretrained: Optional[Result], their_embedder: str = "normalized"
) -> dict:
    """The task's shipped config with the row's pretrained input, otherwise the same model.
    Our biLM through `elmo_bilm_embedder` (its precomputed layers), allennlp-models' LM through
    `elmo_bilm_embedder` with `do_layer_norm` (`their_embedder` normalized) or their
    `bidirectional_lm_token_embedder` (documented), the BERT through `bert_input`, static
    vectors as a frozen `embedding`, or none (the ELMo embedder removed)."""
    params = config_dict(CONFIG_DIR / TASKS[task][0])
    model = params["model"]
    embedders = model["text_field_embedder"]["token_embedders"]
    indexers = params["dataset_reader"]["token_indexers"]
    elmo = embedders.pop("elmo")
    width = 0
    if row in ("no_pretraining", "static_vectors", *BERT_ROWS):
        del indexers["elmo"]
    if row in BERT_ROWS:
        assert pretrained is not None
        bert_input(params, row, pretrained["model"])
        width = pretrained["width"]
    elif row == "static_vectors":
        assert pretrained is not None
        indexers["static"] = {
            "type": "single_id",
            "lowercase_tokens": True,
            "namespace": STATIC_NAMESPACE,
        }
        embedders["static"] = {
            "type": "embedding",
            "embedding_dim": pretrained["dim"],
            "pretrained_file": pretrained["vectors"],
            "vocab_namespace": STATIC_NAMESPACE,
            "trainable": False,
        }
        params["vocabulary"].update(  # every word that has a vector, not only training words
            pretrained_files={STATIC_NAMESPACE: pretrained["vectors"]},
            min_pretrained_embeddings={STATIC_NAMESPACE: pretrained["words"]},
        )
        width = pretrained["dim"]
    elif row == "allennlp_models_transformer" and their_embedder == "normalized":
        assert pretrained is not None
        embedders["elmo"] = dict(elmo, pretrained_file=pretrained["archive"], do_layer_norm=True)
        width = pretrained["width"]
    elif row == "allennlp_models_transformer":
        assert pretrained is not None
        embedders["elmo"] = {
            "type": "bidirectional_lm_token_embedder",
            "archive_file": pretrained["archive"],
            "dropout": elmo["dropout"],
            "requires_grad": False,
            "bos_eos_tokens": ["<S>", "</S>"],
            "remove_bos_eos": True,
        }
        width = pretrained["width"]
    elif row != "no_pretraining":
        assert pretrained is not None
        embedders["elmo"] = dict(
            elmo,
            pretrained_file=pretrained["archive"],
            precomputed_layers=pretrained["layers"],
        )
        width = pretrained["width"]
    extra = POS_DIM if "pos_tag_embedding" in model else 0
    model["encoder"]["input_size"] = width + WORD_DIM + extra
    only_process_settings(params["trainer"])
    return params


def bert_input(params: dict, row: str, model: str) -> None:
    """The BERT's wordpieces for every word (allennlp's mismatched indexer) into allennlp's
    `pretrained_transformer_mismatched` embedder: frozen with a learned mix of its layers
    (computed once per sentence), or fine-tuned (its last layer, its own learning rate
    `BERT_FINETUNE_LR`)."""
    indexers = params["dataset_reader"]["token_indexers"]
    indexers["bert"] = {"type": "pretrained_transformer_mismatched", "model_name": model}
    embedders = params["model"]["text_field_embedder"]["token_embedders"]
    if row == "bert_mlm_frozen":
        embedders["bert"] = {
            "type": "pretrained_transformer_mismatched_frozen",
            "model_name": model,
        }
        return
    embedders["bert"] = {
        "type": "pretrained_transformer_mismatched",
        "model_name": model,
        "train_parameters": True,
    }
    group = [["^text_field_embedder\\.token_embedder_bert\\."], {"lr": BERT_FINETUNE_LR}]
    params["trainer"]["optimizer"]["parameter_groups"] = [group]


def downstream_params(
    task: str,
    row: str,
    pretrained: Optional[Result],
    data: dict[str, Any],
    train: str,
    seed: int,
    budget: Budget,
    their_embedder: str = "normalized",
) -> dict:
    """`downstream_config` trained on `data[train]` with `DOWNSTREAM_TRAINING`, stopped on the
    validation split, its best epoch evaluated on the test set; the vocabulary from the training
    data only."""
    params = downstream_config(task, row, pretrained, their_embedder)
    params.update(
        train_data_path=str(data[train]),
        validation_data_path=str(data["validation"]),
        test_data_path=str(data["test"]),
        evaluate_on_test=True,
        datasets_for_vocab_creation=["train"],
        **seeds(seed),
    )
    params["data_loader"]["batch_sampler"]["batch_size"] = DOWNSTREAM_TRAINING["batch_size"][task]
    params["trainer"].update(
        num_epochs=budget.max_epochs,
        patience=budget.patience,
        learning_rate_scheduler=DOWNSTREAM_TRAINING["learning_rate_scheduler"],
    )
    return params


def train_downstream(params: dict, task: str, folder: Path) -> Result:
    """`allennlp train` of `params` -> its validation and test figures, epochs and CPU time."""
    folder.mkdir(parents=True, exist_ok=True)
    config = folder / "config.json"
    config.write_text(json.dumps(params))
    model = folder / "model"
    if model.exists():  # left by a run that stopped before this stage finished
        shutil.rmtree(model)
    cost = allennlp(["train", str(config), "-s", str(model)], folder / "train.log")
    metrics = json.loads((model / "metrics.json").read_text())
    metric = TASKS[task][1]
    return {
        "validation": metrics[f"best_validation_{metric}"],
        "test": metrics[f"test_{metric}"],
        "best_epoch": metrics["best_epoch"] + 1,
        "epochs_run": metrics["epoch"] + 1,
        "cpu_s": cost["cpu_s"],
        "wall_s": cost["wall_s"],
    }


# --- the plan -----------------------------------------------------------------------------


@dataclass
class Plan:
    rows: list[str]
    data: dict[str, Any]  # "wiki" and "ewt" paths
    budget: Budget
    out: Path
    their_embedder: str = "normalized"

    def stages(self) -> list[Stage]:
        """Pretraining (then elmo-embed) per biLM row and fastText; the table's downstream runs;
        the curve's, whose biLM row is the best by validation UPOS (known once the table's
        biLM taggers are done)."""
        by_name = {stage.name: stage for row in self.rows for stage in self.pretraining(row)}
        stages = list(by_name.values())  # the BERT rows share their pretraining
        for row in self.rows:
            for task in TASKS:
                for seed in range(self.budget.seeds):
                    stages.append(self.downstream(task, row, "train", seed))
        curve_rows = [
            row
            for row in CURVE_ROWS
            if row in self.rows or set(BEST_OF.get(row, ())) & set(self.rows)
        ]
        for row in curve_rows:
            for size in self.budget.curve_sizes:
                for seed in range(self.budget.seeds):
                    stages.append(self.downstream("upos", row, f"train_{size}", seed))
        return stages

    def source(self, row: str) -> Optional[str]:
        """The stage whose result holds the row's pretrained input (None: no pretraining)."""
        if row in ("lstm_stateless", "lstm_stateful", "transformer"):
            return f"embed_{row}"
        return None if row == "no_pretraining" else pretraining_stage(row)

    def pretraining(self, row: str) -> list[Stage]:
        if row == "no_pretraining":
            return []
        wiki, sentences = self.data["wiki"], self.data["ewt"]["sentences"]
        if row in BERT_ROWS:
            bert = self.out / "bert_mlm"
            bert.mkdir(exist_ok=True)
            return [
                Stage(
                    "pretrain_bert_mlm",
                    lambda _: pretrain_bert(wiki, self.budget, bert),
                    cost=3000,
                    summary=lambda r: (
                        f"{r['epochs_run']} epochs (best {r['best_epoch']}), held-out masked-LM "
                        f"loss {r['heldout_mlm_loss']:.3f}, {r['pretrain_cpu_s'] / 60:.1f} CPU min"
                    ),
                )
            ]
        folder = self.out / row
        folder.mkdir(exist_ok=True)
        if row == "static_vectors":
            return [
                Stage(
                    "pretrain_static_vectors",
                    lambda _: train_static_vectors(wiki, sentences, self.budget, folder),
                    cost=60,
                )
            ]
        stages = [
            Stage(
                f"pretrain_{row}",
                lambda _: pretrain(row, wiki, self.budget, folder),
                cost=3000,
                summary=lambda r: (
                    f"{r['epochs_run']} epochs (best {r['best_epoch']}), held-out perplexity "
                    f"{r['heldout_perplexity']:.1f}, {r['pretrain_cpu_s'] / 60:.1f} CPU min"
                ),
            )
        ]
        if self.source(row) == f"embed_{row}":
            stages.append(
                Stage(
                    f"embed_{row}",
                    lambda needs: dict(
                        needs[f"pretrain_{row}"],
                        **embed_ewt(needs[f"pretrain_{row}"], sentences, folder),
                    ),
                    needs=(f"pretrain_{row}",),
                    cost=60,
                    summary=lambda r: f"{r['cpu_s']:.0f} CPU s",
                )
            )
        return stages

    def downstream(self, task: str, row: str, train: str, seed: int) -> Stage:
        """One tagger / parser run; `row` best_bilm / best_bert: that of the biLM / BERT rows
        with the best validation UPOS (curve only), or the run's one row of that kind."""
        candidates = [r for r in self.rows if r in BEST_OF.get(row, ())]
        if len(candidates) == 1:  # its own curve runs, under its own name
            row = candidates[0]
        name = table_run(task, row, seed) if train == "train" else f"curve_{row}_{train}_seed{seed}"
        if row in BEST_OF:
            needs = tuple(
                dict.fromkeys(self.source(r) or "" for r in candidates)  # once each
            ) + tuple(table_run("upos", r, s) for r in candidates for s in range(self.budget.seeds))
        else:
            needs = tuple(filter(None, [self.source(row)]))

        def run(results: dict[str, Result]) -> Result:
            chosen = best_row(results, BEST_OF[row]) if row in BEST_OF else row
            source = self.source(chosen)
            pretrained = results[source] if source else None
            params = downstream_params(
                task,
                chosen,
                pretrained,
                self.data["ewt"],
                train,
                seed,
                self.budget,
                self.their_embedder,
            )
            return dict(train_downstream(params, task, self.out / "downstream" / name), row=chosen)

        return Stage(
            name,
            run,
            needs,
            cost=600 if task == "las" else 200,
            summary=lambda r: (
                f"({r['row']}) test {r['test']:.4f}, validation {r['validation']:.4f}, "
                f"{r['epochs_run']} epochs, {r['cpu_s'] / 60:.1f} CPU min"
            ),
        )


def pretraining_stage(row: str) -> str:
    return "pretrain_bert_mlm" if row in BERT_ROWS else f"pretrain_{row}"


def table_run(task: str, row: str, seed: int) -> str:
    """The stage (and row-file run) name of one of the table's taggers / parsers."""
    return f"{task}_{row}_seed{seed}"


def best_row(results: dict[str, Result], candidates: tuple[str, ...]) -> str:
    """The row of `candidates` with the highest mean validation UPOS in the table (test figures
    choose nothing)."""
    scores: dict[str, list[float]] = {}
    for name, result in results.items():
        if name.startswith("upos_") and result["row"] in candidates:
            scores.setdefault(result["row"], []).append(result["validation"])
    return max(scores, key=lambda row: statistics.mean(scores[row]))


# --- per-row results files ----------------------------------------------------------------


def run_settings(budget: Budget, their_embedder: str) -> dict[str, Any]:
    """What a row's results depend on: the budget, the protocol, the data files and the
    configs (as JSON reads them back)."""
    data = (wikitext_file(), shared_data_dir() / EWT)
    configs = sorted({*BILM_CONFIGS.values(), *(config for config, _ in TASKS.values())})
    settings = {
        **vars(budget),
        "allennlp_models_embedder": their_embedder,
        "ewt_splits": EWT_SPLITS,
        "protocol": PROTOCOL,
        "downstream_training": DOWNSTREAM_TRAINING,
        "data": {path.name: file_fingerprint(path) for path in data},
        "configs": {name: config_fingerprint(CONFIG_DIR / name) for name in configs},
    }
    return json.loads(json.dumps(settings))


def file_fingerprint(path: Path) -> str:
    data = path.read_bytes()
    return f"{len(data)} bytes, sha256 {hashlib.sha256(data).hexdigest()[:16]}"


def config_fingerprint(config: Path) -> str:
    """The config as allennlp reads it: its comments and layout do not count."""
    text = json.dumps(config_dict(config), sort_keys=True)
    return "sha256 " + hashlib.sha256(text.encode()).hexdigest()[:16]


def write_row_files(
    folder: Path, rows: list[str], results: dict[str, Result], settings: dict[str, Any]
) -> None:
    """FOLDER/ROW.json per row: the settings, the row's pretraining and its downstream runs
    (the table's and the curve's), without the run folder's paths."""
    folder.mkdir(parents=True, exist_ok=True)
    for row in rows:
        runs = {
            name: {key: value for key, value in result.items() if key not in PATHS}
            for name, result in results.items()
            if name == pretraining_stage(row) or result.get("row") == row
        }
        path = folder / f"{row}.json"
        document = {"row": row, "settings": settings, "runs": runs}
        write_atomically(path, json.dumps(document, indent=1, sort_keys=True) + "\n")
        print(f"results of {row}: {path}")


def results_from_files(
    folder: Path, rows: list[str], settings: dict[str, Any]
) -> dict[str, Result]:
    """The stage results in FOLDER's row files. The curve's best biLM / BERT is chosen among
    the files' rows by validation UPOS; its curve runs come from that row's file."""
    files = {row: read_row_file(folder / f"{row}.json", settings) for row in rows}
    table = {
        name: run
        for found in files.values()
        for name, run in found.items()
        if not name.startswith("curve_")
    }
    chosen = {
        group: best_row(table, candidates)
        for group, candidates in BEST_OF.items()
        if set(candidates) & set(rows)
    }
    for row in sorted({*chosen.values(), *(set(CURVE_ROWS) & set(rows))}):
        found = sum(name.startswith("curve_") for name in files[row])
        if found < len(settings["curve_sizes"]) * settings["seeds"]:
            raise SystemExit(
                f"{folder / row}.json: {found} curve runs, not one per size and seed; the curve "
                f"takes {row}'s: rerun `--rows {row}` alone"
            )
    curves = {  # the chosen row's file only: every biLM / BERT row's file has curve runs
        name: run
        for found in files.values()
        for name, run in found.items()
        if name.startswith("curve_")
        and chosen.get(curve_group(run["row"]), run["row"]) == run["row"]
    }
    return {**table, **curves}


def curve_group(row: str) -> str:
    """The curve's name for `row`'s runs: best_bilm / best_bert for a biLM / BERT row."""
    return next((group for group, rows in BEST_OF.items() if row in rows), row)


def by_curve_group(results: dict[str, Result]) -> dict[str, Result]:
    """`results` with each curve run named by its row's curve group (a row run alone names
    them by itself: curve_lstm_stateful_train_200_seed0 -> curve_best_bilm_train_200_seed0)."""
    return {
        f"curve_{curve_group(run['row'])}_train_{name.split('_train_')[-1]}"
        if name.startswith("curve_")
        else name: run
        for name, run in results.items()
    }


def read_row_file(path: Path, settings: dict[str, Any]) -> dict[str, Result]:
    """The row file's runs; a file that is missing, unreadable, another row's, made with other
    settings or without one of the table's runs stops the build with one line."""
    if not path.is_file():
        raise SystemExit(
            f"{path}: missing; make it with `python -m benchmarks.quality_table --rows {path.stem} "
            f"--results {path.parent}`"
        )
    try:
        found = json.loads(path.read_text(encoding="utf-8"))
        row, made_with, runs = found["row"], found["settings"], found["runs"]
    except (ValueError, KeyError, TypeError) as error:
        raise SystemExit(f"{path}: not a row file ({type(error).__name__}: {error})") from None
    if row != path.stem:
        raise SystemExit(f"{path}: holds the results of {row}, not of {path.stem}")
    if difference := first_difference(made_with, settings):
        raise SystemExit(
            f"{path}: made with other settings ({difference}); rerun its row with this build's "
            "settings"
        )
    table_runs = [table_run(task, row, seed) for task in TASKS for seed in range(settings["seeds"])]
    if row != "no_pretraining":
        table_runs.insert(0, pretraining_stage(row))
    if missing := [name for name in table_runs if name not in runs]:
        raise SystemExit(f"{path}: incomplete, without the run {missing[0]}; rerun its row")
    return runs


def first_difference(found: dict, expected: dict, prefix: str = "") -> Optional[str]:
    """The first setting that differs, as `name: the file's value, this build's value`."""
    for key in sorted(set(found) | set(expected)):
        theirs, ours = found.get(key), expected.get(key)
        if isinstance(theirs, dict) and isinstance(ours, dict):
            if inner := first_difference(theirs, ours, f"{prefix}{key}."):
                return inner
        elif theirs != ours:
            return f"{prefix}{key}: the file's {theirs!r}, this build's {ours!r}"
    return None


# --- the report ---------------------------------------------------------------------------


def mean_sd(values: list[float]) -> tuple[float, float]:
    return statistics.mean(values), statistics.stdev(values) if len(values) > 1 else 0.0


def summarize(rows: list[str], results: dict[str, Result], budget: Budget) -> dict[str, Any]:
    """Per row: pretraining figures, and per task the test and validation means and sds, the
    epochs and the runs stopped at `budget.max_epochs`; the curve: test UPOS per training-set
    size for its rows; per task (and the curve) the runs at that cap."""
    results = by_curve_group(results)
    table: dict[str, Any] = {}
    by_task: dict[str, list[Result]] = {task: [] for task in [*TASKS, "upos_curve"]}
    for row in rows:
        summary: dict[str, Any] = {}
        pretraining = results.get(pretraining_stage(row))
        if pretraining:
            summary["pretraining"] = {
                key: value for key, value in pretraining.items() if key not in PATHS
            }
        for task in TASKS:
            runs = [results[table_run(task, row, seed)] for seed in range(budget.seeds)]
            summary[task] = dict(figures_of(runs), **at_cap(runs, budget.max_epochs))
            by_task[task] += runs
        table[row] = summary
    curve: dict[str, dict[str, Any]] = {}
    for row in CURVE_ROWS:
        runs_by_size = {
            size: [
                results.get(f"curve_{row}_train_{size}_seed{seed}") for seed in range(budget.seeds)
            ]
            for size in budget.curve_sizes
        }
        if not all(all(runs) for runs in runs_by_size.values()):
            continue
        name = runs_by_size[budget.curve_sizes[0]][0]["row"]  # type: ignore[index]
        points = {str(size): figures_of(runs) for size, runs in runs_by_size.items()}  # type: ignore[arg-type]
        points[str(budget.train_sentences)] = table[name]["upos"]
        curve[name] = points
        by_task["upos_curve"] += [run for runs in runs_by_size.values() for run in runs]  # type: ignore[misc]
    caps = {task: at_cap(runs, budget.max_epochs) for task, runs in by_task.items() if runs}
    return {"table": table, "curve": curve, "at_cap": caps}


def at_cap(runs: list[Result], cap: int) -> dict[str, int]:
    """How many of the downstream runs trained until the epoch cap (patience had not stopped
    them earlier)."""
    return {"at_cap": sum(run["epochs_run"] >= cap for run in runs), "runs": len(runs)}


def figures_of(runs: list[Result]) -> dict[str, Any]:
    test_mean, test_sd = mean_sd([run["test"] for run in runs])
    validation_mean, validation_sd = mean_sd([run["validation"] for run in runs])
    return {
        "test_mean": round(test_mean, 4),
        "test_sd": round(test_sd, 4),
        "validation_mean": round(validation_mean, 4),
        "validation_sd": round(validation_sd, 4),
        "test": [round(run["test"], 4) for run in runs],
        "best_epochs": [run["best_epoch"] for run in runs],
        "epochs_run": [run["epochs_run"] for run in runs],
        "cpu_s": round(sum(run["cpu_s"] for run in runs), 1),
    }


def print_table(summary: dict[str, Any], cap: int) -> None:
    print(
        "\n| row | pretraining epochs (best / run) | held-out perplexity (own mode / stateless) "
        "| pretraining CPU min | UPOS | LAS | downstream epochs best / run (tagger; parser) "
        f"| runs at the {cap}-epoch cap (tagger; parser) |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for row, figures in summary["table"].items():
        print(f"| {row} | " + " | ".join(pretraining_cells(figures.get("pretraining"))), end=" ")
        upos, las = figures["upos"], figures["las"]
        print(
            f"| {plus_minus(upos)} | {plus_minus(las)} | {epochs_cell(upos)}; {epochs_cell(las)} ",
            end="",
        )
        print(f"| {upos['at_cap']} of {upos['runs']}; {las['at_cap']} of {las['runs']} |")
    for row, points in summary["curve"].items():
        cells = [f"{size} sentences {plus_minus(point)}" for size, point in points.items()]
        print(f"curve {row}: " + ", ".join(cells))
    shares = [
        f"{task} {n['at_cap']} of {n['runs']} ({n['at_cap'] / n['runs']:.0%})"
        for task, n in summary["at_cap"].items()
    ]
    print(f"downstream runs that reached the {cap}-epoch cap: " + ", ".join(shares))


def epochs_cell(figures: dict[str, Any]) -> str:
    """Mean best epoch / mean epochs run."""
    best, run = statistics.mean(figures["best_epochs"]), statistics.mean(figures["epochs_run"])
    return f"{best:.1f} / {run:.1f}"


def pretraining_cells(pretraining: Optional[dict[str, Any]]) -> list[str]:
    """Epochs (best / run, and whether the last epoch was the best), held-out perplexities,
    CPU minutes; "-" where none applies."""
    if not pretraining:
        return ["-", "-", "-"]
    best, run = pretraining.get("best_epoch", pretraining["epochs_run"]), pretraining["epochs_run"]
    epochs = f"{best} / {run}"
    if "best_epoch" in pretraining and best == run:  # patience never stopped it
        epochs += ", still improving at the cap"
    perplexity = "-"
    if "heldout_perplexity" in pretraining:
        perplexity = f"{pretraining['heldout_perplexity']:.1f} / "
        perplexity += f"{pretraining['heldout_perplexity_stateless']:.1f}"
    elif "heldout_mlm_loss" in pretraining:  # a masked LM: its own figure, not a perplexity
        perplexity = f"masked-LM loss {pretraining['heldout_mlm_loss']:.3f}"
    return [epochs, perplexity, f"{pretraining['pretrain_cpu_s'] / 60:.1f}"]


def plus_minus(figures: dict[str, Any]) -> str:
    return f"{figures['test_mean']:.4f} +- {figures['test_sd']:.4f}"


def plot_curve(curve: dict[str, dict[str, Any]], path: Path) -> None:
    """Test UPOS (mean, error bars 1 sd) against training sentences, one line per row."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(6, 4), dpi=120)
    for row, points in curve.items():
        sizes = [int(size) for size in points]
        axes.errorbar(
            sizes,
            [p["test_mean"] for p in points.values()],
            yerr=[p["test_sd"] for p in points.values()],
            marker="o",
            capsize=3,
            label=row + curve_label(row),
        )
    axes.set_xscale("log")
    axes.set_xticks(sorted({int(size) for points in curve.values() for size in points}))
    axes.get_xaxis().set_major_formatter(matplotlib.ticker.ScalarFormatter())
    axes.get_xaxis().set_minor_formatter(matplotlib.ticker.NullFormatter())
    axes.set_xlabel("EWT training sentences")
    axes.set_ylabel("test UPOS accuracy")
    axes.set_title("UPOS tagger: labelled data vs pretraining")
    axes.grid(alpha=0.3)
    axes.legend()
    figure.tight_layout()
    figure.savefig(path)
    plt.close(figure)


def curve_label(row: str) -> str:
    if row in BILM_CONFIGS:
        return " (best biLM)"
    return " (better BERT)" if row in BERT_ROWS else ""


def targets(summary: dict[str, Any]) -> dict[str, Any]:
    """allennlp-models' row at least matches no pretraining (within one sd of the two, the
    larger), and how far the best biLM row is from static vectors and from no pretraining."""
    table = summary["table"]
    found: dict[str, Any] = {}
    for task in TASKS:
        if "allennlp_models_transformer" in table and "no_pretraining" in table:
            theirs, none = table["allennlp_models_transformer"][task], table["no_pretraining"][task]
            margin = theirs["test_mean"] - none["test_mean"]
            found[f"allennlp_models_minus_no_pretraining_{task}"] = round(margin, 4)
            found[f"allennlp_models_not_below_no_pretraining_{task}"] = margin >= -max(
                theirs["test_sd"], none["test_sd"]
            )
        bilms = [row for row in table if row in BILM_CONFIGS]
        if bilms:
            best = max(bilms, key=lambda row: table[row][task]["validation_mean"])
            found[f"best_bilm_{task}"] = best
            for other in ("static_vectors", "no_pretraining"):
                if other in table:
                    found[f"best_bilm_minus_{other}_{task}"] = round(
                        table[best][task]["test_mean"] - table[other][task]["test_mean"], 4
                    )
    return found


def paired_comparisons(summary: dict[str, Any]) -> dict[str, Any]:
    """Each pretrained LM row against each BERT row (the two BERT rows once), static vectors and
    no pretraining, per task: the difference of the test means, whether the two rows' mean +-
    sd ranges overlap, and a two-sided paired t-test over the downstream seeds (run k of both
    rows has seed k). Its p is Holm-adjusted over the task's comparisons: "ahead" / "behind" at
    an adjusted p < 0.05, otherwise "tie"; one seed: no test."""
    table = summary["table"]
    rows = [row for row in table if row in BILM_CONFIGS or row in BERT_ROWS]
    found: dict[str, Any] = {}
    for task in TASKS:
        tested = {}
        for row in rows:
            for other in [*BERT_ROWS, "static_vectors", "no_pretraining"]:
                if other in (row, *rows[: rows.index(row)]) or other not in table:
                    continue  # itself, or a pair already compared
                ours, theirs = table[row][task], table[other][task]
                differences = [
                    round(a - b, 4) for a, b in zip(ours["test"], theirs["test"], strict=True)
                ]
                low, high = sorted((ours, theirs), key=lambda f: f["test_mean"])
                tested[f"{row}_vs_{other}_{task}"] = {
                    "difference": round(statistics.mean(differences), 4),
                    "per_seed": differences,
                    "sds_overlap": low["test_mean"] + low["test_sd"]
                    >= high["test_mean"] - high["test_sd"],
                    "paired_p": paired_p(differences),
                }
        found.update(holm(tested))
    return found


def paired_p(differences: list[float]) -> Optional[float]:
    """Two-sided p of the paired t-test (the per-seed differences against 0; all equal: 0 if
    not zero, else 1); None for one seed."""
    from scipy.stats import ttest_1samp

    if len(differences) < 2:
        return None
    if len(set(differences)) == 1:
        return 1.0 if differences[0] == 0 else 0.0
    return round(float(ttest_1samp(differences, 0.0).pvalue), 4)


def holm(tested: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Each comparison with its Holm-adjusted p (`holm_p`) and its verdict."""
    order = sorted((c["paired_p"], name) for name, c in tested.items() if c["paired_p"] is not None)
    adjusted, running = {}, 0.0
    for rank, (p, name) in enumerate(order):
        running = max(running, min(1.0, (len(order) - rank) * p))
        adjusted[name] = round(running, 4)
    for name, comparison in tested.items():
        p = adjusted.get(name)
        comparison["holm_p"] = p
        if p is None:
            comparison["verdict"] = "one seed: no test"
        elif p >= 0.05:
            comparison["verdict"] = "tie"
        else:
            comparison["verdict"] = "ahead" if comparison["difference"] > 0 else "behind"
    return tested


DECLARATION = Declaration(
    quick=["--quick"],
    cheapest=["--quick"],
    cheapest_status="skipped",
    data=(WIKITEXT, EWT),
)


def main(argv: list[str]) -> dict[str, Any]:
    parser = benchmark_parser(__doc__)
    parser.add_argument(
        "--out",
        help="folder for data, models, logs, stage results and the curve "
        "(a rerun continues there; default: a new temporary folder)",
    )
    parser.add_argument("--quick", action="store_true", help=f"a small run: {QUICK}")
    parser.add_argument("--seeds", type=int, default=3, help="downstream seeds per row")
    parser.add_argument(
        "--workers", type=int, default=2, help="stages side by side, one thread each"
    )
    parser.add_argument("--pretrain-epochs", type=int, default=10, help="cap on pretraining epochs")
    parser.add_argument("--pretrain-patience", type=int, default=1)
    parser.add_argument("--max-epochs", type=int, default=40, help="cap on downstream epochs")
    parser.add_argument("--patience", type=int, default=5, help="downstream patience (epochs)")
    parser.add_argument("--rows", default=",".join(ROWS))
    parser.add_argument(
        "--allennlp-models-embedder",
        choices=["normalized", "documented"],
        default="normalized",
        help="allennlp-models' LM downstream: elmo_bilm_embedder with do_layer_norm, or "
        "allennlp-models' bidirectional_lm_token_embedder (its layers unnormalized)",
    )
    results_options = parser.add_mutually_exclusive_group()
    results_options.add_argument(
        "--results", help="once the rows' stages finish, write each row's results to DIR/ROW.json"
    )
    results_options.add_argument(
        "--from-results",
        help="train nothing: the table, curve and comparisons from DIR/ROW.json of every row, "
        "each made with this command's settings",
    )
    args = parser.parse_args(argv)
    rows = args.rows.split(",")
    if unknown := set(rows) - set(ROWS):
        parser.error(f"--rows: unknown {sorted(unknown)}; choose from {ROWS}")
    if args.seeds < 1 or args.workers < 1:
        parser.error("--seeds and --workers must be at least 1")
    budget = budget_from(args)

    wikitext, ewt = wikitext_file(), shared_data_dir() / EWT
    require_data(wikitext, ewt)
    settings = run_settings(budget, args.allennlp_models_embedder)
    out = Path(args.out or tempfile.mkdtemp(prefix="quality_table_")).resolve()
    out.mkdir(parents=True, exist_ok=True)
    print(f"outputs and logs: {out}")
    if args.from_results:
        results = results_from_files(Path(args.from_results), rows, settings)
        return report(rows, results, budget, out, settings, args.quick)
    keep_settings(out, settings)
    data = {
        "wiki": write_wikitext(wikitext, budget.wiki_lines, out),
        "ewt": write_ewt(ewt, budget, out),
    }
    counts = data["ewt"]["counts"]
    words = len(data["wiki"]["train"].read_text(encoding="utf-8").split())
    print(
        f"pretraining: {wikitext} lines in order, 90% train / 5% validation (stopping) / 5% "
        f"held out{'' if budget.wiki_lines is None else f' (first {budget.wiki_lines} lines)'}; "
        f"{words} training words per epoch, at most {budget.pretrain_epochs} epochs "
        f"({words * budget.pretrain_epochs} words), patience {budget.pretrain_patience}, one seed"
    )
    print(
        f"downstream: {ewt}: {counts['train']} training sentences, {counts['validation']} "
        f"validation (stopping), {counts['test']} test; at most {budget.max_epochs} epochs, "
        f"patience {budget.patience}; {budget.seeds} seeds; curve at "
        f"{budget.curve_sizes + [budget.train_sentences]} sentences; {args.workers} stages side "
        "by side, one thread each",
        flush=True,
    )
    stages = Plan(rows, data, budget, out, args.allennlp_models_embedder).stages()
    results = run_stages(stages, out / "stages", args.workers)
    if args.results:
        write_row_files(Path(args.results), rows, results, settings)
    figures = report(rows, results, budget, out, settings, args.quick)
    figures["budget"].update(workers=args.workers, splits=counts, pretrain_words_per_epoch=words)
    return figures


def report(
    rows: list[str],
    results: dict[str, Result],
    budget: Budget,
    out: Path,
    settings: dict[str, Any],
    quick: bool,
) -> dict[str, Any]:
    """Prints the table, the curve's figures and the comparisons, draws the curve in OUT ->
    the figures of the final line."""
    summary = summarize(rows, results, budget)
    print_table(summary, budget.max_epochs)
    comparisons = paired_comparisons(summary)
    for name, found in comparisons.items():
        print(
            f"{name}: {found['difference']:+.4f} (per seed {found['per_seed']}), paired t-test "
            f"p {found['paired_p']}, Holm-adjusted {found['holm_p']}: {found['verdict']}"
        )
    figures: dict[str, Any] = {
        "headline": ["targets"],
        **summary,
        "targets": targets(summary),
        "comparisons": comparisons,
    }
    if summary["curve"]:
        plot_curve(summary["curve"], out / "label_efficiency.png")
        print(f"curve: {out / 'label_efficiency.png'}")
        figures["curve_png"] = str(out / "label_efficiency.png")
    cpu = sum(result["cpu_s"] for result in results.values())
    figures["budget"] = {
        **{key: settings[key] for key in ("protocol", "allennlp_models_embedder")},
        **vars(budget),
        "cpu_minutes_all_stages": round(cpu / 60, 1),
    }
    print(f"CPU time of all stages: {cpu / 60:.1f} min")
    missed = [key for key, value in figures["targets"].items() if value is False]
    if missed and not quick:
        figures["missed"] = ", ".join(missed)
    return figures


if __name__ == "__main__":
    run_benchmark(NAME, main)
