"""scripts/demo.sh hides exactly fairscale's three FutureWarnings (printed while allennlp imports
itself): its PYTHONWARNINGS setting, run as the demo runs it, silences those and no other."""

import os
import re
import subprocess
import sys

import pytest

from tests.helpers import REPO_ROOT

DEMO = REPO_ROOT / "scripts" / "demo.sh"
OTHERS = """
import warnings
warnings.warn("a notice of another module", FutureWarning)
warnings.warn("`torch.jit.script` is deprecated, from elsewhere", FutureWarning)
"""


def demo_pythonwarnings(user_setting: str = "") -> str:
    """PYTHONWARNINGS as scripts/demo.sh sets it (its lines from `fairscale_notices=(` to the
    export, run by bash), starting from the user's own `user_setting`."""
    script = DEMO.read_text()
    block = re.search(r"^fairscale_notices=\(.*?^export PYTHONWARNINGS$", script, re.M | re.S)
    assert block, "scripts/demo.sh no longer sets PYTHONWARNINGS for fairscale's notices"
    env = (
        {**os.environ, "PYTHONWARNINGS": user_setting}
        if user_setting
        else {k: v for k, v in os.environ.items() if k != "PYTHONWARNINGS"}
    )
    shell = f'set -euo pipefail\n{block.group(0)}\nprintf %s "$PYTHONWARNINGS"'
    return subprocess.run(
        ["bash", "-c", shell], env=env, capture_output=True, text=True, check=True
    ).stdout


def future_warnings(stderr: str) -> int:
    """How many FutureWarnings `stderr` reports: counted by their header line, since Python 3.13
    also prints the source line of `python -c` code, which names the category again."""
    return len(re.findall(r": FutureWarning: ", stderr))


def run_python(code: str, pythonwarnings: str) -> str:
    """stderr of `python -c CODE` under the given PYTHONWARNINGS."""
    env = {**os.environ, "PYTHONWARNINGS": pythonwarnings}
    return subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300
    ).stderr


@pytest.mark.slow
def test_demo_hides_the_three_fairscale_notices_and_nothing_else():
    setting = demo_pythonwarnings()
    assert len(setting.split(",")) == 3
    plain = run_python("import allennlp.commands", "default")
    assert future_warnings(plain) == 3  # what a user sees without the setting
    assert future_warnings(run_python("import allennlp.commands", setting)) == 0
    others = run_python(OTHERS, setting)
    assert future_warnings(others) == 2  # same category, other modules: still shown


def test_demo_keeps_the_users_own_pythonwarnings_after_its_own():
    assert demo_pythonwarnings("error::DeprecationWarning").endswith(",error::DeprecationWarning")
