"""Shared pieces of the language-model training benchmarks: WikiText split, batches, timing.

Both sides of a comparison train on the same batches with the same optimizer loop, one after
the other in the same process, on the same machine.
"""

import json
import time
from dataclasses import dataclass
from typing import Any, Optional

import torch
from allennlp.common import Params
from allennlp.data import Batch, Vocabulary
from allennlp.models import Model

import elmo_plugin  # noqa: F401  (registers components)
from benchmarks.support.common import CONFIG_DIR, config_dict, require_data
from benchmarks.support.wikitext_data import split_train_valid, wikitext_file
from elmo_plugin.data.elmo_corpus_reader import ElmoCorpusReader


def wikitext_split(max_lines: Optional[int] = None) -> dict[str, Any]:
    """First 90% of WikiText-2 valid.txt lines for training, the last 10% for validation
    (`common.Skip` when the file is missing)."""
    path = wikitext_file()
    require_data(path)
    train, valid = split_train_valid(path.read_text(encoding="utf-8").splitlines())
    description = (
        f"{path}: lines 1-{len(train)} train, {len(train) + 1}-{len(train) + len(valid)} validation"
    )
    if max_lines:
        train = train[:max_lines]
    return {"train": train, "valid": valid, "description": description}


def make_batches(
    lines: list[str], vocab: Optional[Vocabulary], batch_size: int, max_sequence_length: int = 20
):
    """Instances from `elmo_corpus` (headings skipped, windows of `max_sequence_length`), sorted
    into length buckets -> (vocab, list of tensor dicts, number of target tokens)."""
    reader = ElmoCorpusReader(max_sequence_length=max_sequence_length, skip_headings=True)
    instances = []
    for line in lines:
        if line.strip() and not line.strip().startswith("="):
            for window in reader.windows(reader._tokenizer.tokenize(line)):
                instance = reader.text_to_instance(tokens=list(window))
                reader.apply_token_indexers(instance)
                instances.append(instance)
    vocab = vocab or Vocabulary.from_instances(instances, min_count={"tokens": 2})
    instances.sort(key=lambda instance: len(instance["source"]))
    batches = []
    for start in range(0, len(instances), batch_size):
        batch = Batch(instances[start : start + batch_size])
        batch.index_instances(vocab)
        batches.append(batch.as_tensor_dict())
    generator = torch.Generator().manual_seed(0)
    order = torch.randperm(len(batches), generator=generator).tolist()
    return vocab, [batches[i] for i in order]


def model_config(config: str) -> dict:
    """The `model` block of a config in training_config/, as a plain dict to edit."""
    return config_dict(CONFIG_DIR / config)["model"]


def build_model(model: dict, vocab: Vocabulary) -> Model:
    torch.manual_seed(0)
    return Model.from_params(vocab=vocab, params=Params(json.loads(json.dumps(model))))


@dataclass
class TrainingRun:
    tokens_per_second: float
    steps: int
    validation_perplexity: float
    parameters: int


def train_and_measure(
    model: Model, train: list[dict], valid: list[dict], steps: int, lr: float = 2e-3
) -> TrainingRun:
    """`steps` Adam steps (after 2 warm-up steps) timed; then full-softmax validation perplexity."""
    optimizer = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=lr)
    model.train()

    def step(batch: dict) -> None:
        optimizer.zero_grad()
        model(**batch)["loss"].backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 10.0)
        optimizer.step()

    for batch in train[:2]:
        step(batch)
    tokens, start = 0, time.perf_counter()
    for index in range(steps):
        batch = train[2 + index % (len(train) - 2)]
        step(batch)
        tokens += int((batch["source"]["tokens"]["tokens"] > 0).sum())
    elapsed = time.perf_counter() - start
    return TrainingRun(
        tokens / elapsed,
        steps,
        validation_perplexity(model, valid),
        sum(p.numel() for p in model.parameters()),
    )


def validation_perplexity(model: Model, valid: list[dict]) -> float:
    """exp of the token-weighted mean NLL of both directions (full softmax)."""
    model.eval()
    total_nll, total_targets = 0.0, 0.0
    with torch.no_grad():
        for batch in valid:
            output = model(**batch)
            targets = float(output["batch_weight"])
            total_nll += (
                0.5 * (float(output["forward_loss"]) + float(output["backward_loss"])) * targets
            )
            total_targets += targets
    return float(torch.exp(torch.tensor(total_nll / total_targets)))
