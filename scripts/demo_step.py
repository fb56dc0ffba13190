"""One step of `make demo`: runs a command with its whole output (allennlp's log lines, progress
bars) going to a log file, and shows on the terminal only its progress bar, redrawn on one line.
On failure the log's last lines are printed and the command's exit status is returned.

    python scripts/demo_step.py LOG_FILE COMMAND [ARGS...]
"""

import re
import subprocess
import sys

# tqdm's bars: "... 12/40 [00:03<00:07, 3.9it/s]" or "123it [00:01, 99.0it/s]"
PROGRESS = re.compile(r"(\d+%\||\d+it \[|it/s\]|s/it\]|it/s,)")
# allennlp's bar: "DESCRIPTION ||: 30%|###   | 12/40 [00:03<00:07, 3.9it/s]" (the running metrics
# first), or without a total "DESCRIPTION ||: 123it [00:01, 99.0it/s]"
BAR = re.compile(
    r"^(?P<description>.*?)[\s|:]*(?:(?P<percent>\d+%)\|[^|]*\|\s*)?(?P<count>\d+(?:/\d+|it) \[.*)$"
)


def terminal_line(bar: str, width: int = 110) -> str:
    """A bar for one terminal line: its count, times and rate first (the total and the time
    left stay visible), then the description (the running metrics), cut at `width`."""
    match = BAR.match(bar.strip())
    if not match:
        return bar.strip()[:width]
    head = " ".join(part for part in (match["percent"], match["count"]) if part)
    return f"{head}  {match['description']}".strip()[:width]


def main(log_file: str, command: list[str]) -> int:
    shown = False
    with open(log_file, "w", encoding="utf-8") as log:
        process = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1
        )
        assert process.stdout is not None
        pending = ""
        while chunk := process.stdout.read(256):
            log.write(chunk)
            pending += chunk
            *pieces, pending = re.split(r"[\r\n]", pending)
            bars = [piece for piece in pieces if PROGRESS.search(piece)]
            if bars and sys.stdout.isatty():
                sys.stdout.write("\r   " + terminal_line(bars[-1]).ljust(110))
                sys.stdout.flush()
                shown = True
        status = process.wait()
    if shown:
        sys.stdout.write("\r" + " " * 113 + "\r")
    if status:
        with open(log_file, encoding="utf-8") as log:
            tail = log.read().splitlines()[-30:]
        print("\n".join(tail), file=sys.stderr)
        print(f"   failed (exit status {status}); the whole log: {log_file}", file=sys.stderr)
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2:]))
