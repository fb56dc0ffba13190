"""`make demo`'s one-line progress bar keeps allennlp's count, total and time left in view: they
come first, the running metrics after them."""

import importlib.util

from tests.helpers import REPO_ROOT

# scripts/ is not a package: the script's module, loaded from its file
SPEC = importlib.util.spec_from_file_location("demo_step", REPO_ROOT / "scripts" / "demo_step.py")
assert SPEC is not None and SPEC.loader is not None
demo_step = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(demo_step)
terminal_line = demo_step.terminal_line

METRICS = "forward_perplexity: 250.12, backward_perplexity: 251.00, perplexity: 250.50, loss: 5.60"


def test_the_count_total_and_time_left_come_before_the_metrics():
    bar = f"{METRICS} ||:  28%|##8       | 43/151 [00:21<00:52,  2.04it/s]"
    line = terminal_line(bar)
    assert line.startswith("28% 43/151 [00:21<00:52,  2.04it/s]  forward_perplexity: 250.12")
    assert len(line) == 110  # the metrics cut, not the time left


def test_a_bar_without_a_total_and_other_lines_are_kept():
    assert (
        terminal_line(f"{METRICS} ||: 151it [01:13,  2.04it/s]")
        == (f"151it [01:13,  2.04it/s]  {METRICS}"[:110])
    )
    assert terminal_line("  building vocabulary ") == "building vocabulary"
