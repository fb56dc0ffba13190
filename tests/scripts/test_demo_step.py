"""`make demo`'s one-line progress bar keeps allennlp's count, total and time left in view: they
come first, the running metrics after them."""

from scripts.demo_step import shown

METRICS = "forward_perplexity: 250.12, backward_perplexity: 251.00, perplexity: 250.50, loss: 5.60"


def test_the_count_total_and_time_left_come_before_the_metrics():
    bar = f"{METRICS} ||:  28%|##8       | 43/151 [00:21<00:52,  2.04it/s]"
    line = shown(bar)
    assert line.startswith("28% 43/151 [00:21<00:52,  2.04it/s]  forward_perplexity: 250.12")
    assert len(line) == 110  # the metrics cut, not the time left


def test_a_bar_without_a_total_and_other_lines_are_kept():
    assert (
        shown(f"{METRICS} ||: 151it [01:13,  2.04it/s]")
        == (f"151it [01:13,  2.04it/s]  {METRICS}"[:110])
    )
    assert shown("  building vocabulary ") == "building vocabulary"
