"""Training tokens/s: our LSTM ELMo biLM vs allennlp-models' `language_model` with its
`bidirectional_language_model_transformer`, at a comparable contextualizer parameter count,
on the same WikiText batches, in one run. Usage:

    python -m benchmarks.lstm_vs_allennlp_models_transformer [--steps 60] [--batch-size 32]
        [--train-lines 1200]

Ends with one JSON line (benchmarks/support/common.py): each side's training tokens/s and validation
perplexity, and the ratios ours / theirs.
"""

from typing import Any

from benchmarks.support.common import Declaration, benchmark_parser, run_benchmark
from benchmarks.support.lm_training_speed import (
    build_model,
    make_batches,
    model_config,
    train_and_measure,
    wikitext_split,
)
from benchmarks.support.wikitext_data import WIKITEXT

NAME = "lstm_vs_allennlp_models_transformer"
# Ours: the demo-size config as it is (char CNN 512 filters -> 128; LSTM 2 x 512 cells / 128,
# clips 3).
# Theirs: the same reader, char CNN and softmax; 6 transformer layers of width 128 with
# feed-forward 512 per direction, about the same contextualizer parameter count.
THEIR_CONTEXTUALIZER = {
    "type": "bidirectional_language_model_transformer",
    "input_dim": 128,
    "hidden_dim": 512,
    "num_layers": 6,
    "dropout": 0.1,
}


def their_model_config() -> dict:
    config = model_config("elmo_lstm.jsonnet")
    config.update(type="language_model", bidirectional=True, contextualizer=THEIR_CONTEXTUALIZER)
    return config


def contextualizer_parameters(model) -> int:
    return sum(p.numel() for p in model._contextualizer.parameters())


DECLARATION = Declaration(
    quick=["--steps", "8", "--train-lines", "160"],
    data=(WIKITEXT,),
)


def main(argv: list[str]) -> dict[str, Any]:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--train-lines", type=int, default=1200)
    args = parser.parse_args(argv)

    data = wikitext_split(args.train_lines)
    vocab, train = make_batches(data["train"], None, args.batch_size)
    _, valid = make_batches(data["valid"], vocab, args.batch_size)
    print(
        f"data: {data['description']} "
        f"(first {args.train_lines} training lines, windows of 20 tokens)"
    )
    print(
        f"vocabulary: {vocab.get_vocab_size('tokens')} tokens (min count 2), full softmax; "
        "same char CNN for both"
    )

    runs = {}
    for name, config in [
        ("elmo_plugin elmo_lstm", model_config("elmo_lstm.jsonnet")),
        ("allennlp-models transformer", their_model_config()),
    ]:
        model = build_model(config, vocab)
        run = train_and_measure(model, train, valid, args.steps)
        runs[name] = run
        print(
            f"{name:32s} contextualizer params {contextualizer_parameters(model):>9,d}  "
            f"train {run.tokens_per_second:8.1f} tokens/s  "
            f"validation perplexity after {run.steps} steps {run.validation_perplexity:9.1f}"
        )
    ours, theirs = runs["elmo_plugin elmo_lstm"], runs["allennlp-models transformer"]
    return {
        "headline": ["ratio_tokens_per_s", "ratio_validation_perplexity"],
        "steps": args.steps,
        "ours_tokens_per_s": round(ours.tokens_per_second, 1),
        "theirs_tokens_per_s": round(theirs.tokens_per_second, 1),
        "ours_validation_perplexity": round(ours.validation_perplexity, 1),
        "theirs_validation_perplexity": round(theirs.validation_perplexity, 1),
        "ratio_tokens_per_s": round(ours.tokens_per_second / theirs.tokens_per_second, 2),
        "ratio_validation_perplexity": round(
            ours.validation_perplexity / theirs.validation_perplexity, 2
        ),
    }


if __name__ == "__main__":
    run_benchmark(NAME, main)
