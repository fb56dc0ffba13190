"""benchmarks/quality_table.py's targets, from per-seed results."""

from benchmarks.quality_table import issue_targets


def test_targets_compare_stateful_with_stateless_and_our_best_row_with_allennlp_models():
    results = {
        "lstm_stateless": {
            "perplexity_own": [600.0, 700.0],
            "upos": [0.80, 0.82],
            "las": [0.6, 0.6],
        },
        "lstm_stateful": {
            "perplexity_own": [500.0, 540.0],
            "upos": [0.84, 0.86],
            "las": [0.6, 0.7],
        },
        "allennlp_models_transformer": {"upos": [0.50, 0.54], "las": [0.64, 0.66]},
    }
    assert issue_targets(results) == {
        "stateful_over_stateless_perplexity": 0.8,
        "stateful_lower_perplexity": True,
        "upos_best_row": "lstm_stateful",
        "upos_best_minus_allennlp_models": 0.33,
        "upos_beyond_one_sd": True,
        "las_best_row": "lstm_stateful",
        "las_best_minus_allennlp_models": 0.0,
        "las_beyond_one_sd": False,
    }
