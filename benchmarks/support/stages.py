"""Stages of a long benchmark, run side by side and kept on disk: each stage's result (a JSON
object) is written to FOLDER/NAME.json when it finishes, so a rerun skips every finished stage
and continues where the last run stopped."""

import json
import os
import sys
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

Result = dict[str, Any]


@dataclass
class Stage:
    """`run(results of its needs)` -> its result; `cost`: estimated seconds (the longest ready
    stages start first); `summary(result)`: the progress line's tail."""

    name: str
    run: Callable[[dict[str, Result]], Result]
    needs: tuple[str, ...] = ()
    cost: float = 1.0
    summary: Optional[Callable[[Result], str]] = None


def write_atomically(path: Path, text: str) -> None:
    partial = path.with_name(path.name + ".partial")
    partial.write_text(text)
    os.replace(partial, path)


def run_stages(stages: list[Stage], folder: Path, workers: int) -> dict[str, Result]:
    """Runs every stage whose result is not in `folder` yet, `workers` at a time, each once its
    needs are done, printing a line when each starts and when it finishes. A failing stage
    stops new starts; the running ones finish (and are kept), then its error is raised."""
    folder.mkdir(parents=True, exist_ok=True)
    by_name = {stage.name: stage for stage in stages}
    unknown = {need for stage in stages for need in stage.needs} - set(by_name)
    if unknown:
        raise ValueError(f"stages need unknown stages: {sorted(unknown)}")
    results = {
        name: json.loads((folder / f"{name}.json").read_text())
        for name in by_name
        if (folder / f"{name}.json").is_file()
    }
    if results:
        print(f"{len(results)} of {len(stages)} stages already done in {folder}", flush=True)
    pending = [stage for stage in stages if stage.name not in results]
    running: dict[Future, Stage] = {}
    failure: Optional[BaseException] = None
    with ThreadPoolExecutor(max_workers=workers) as pool:
        while running or (pending and failure is None):
            ready = [s for s in pending if all(need in results for need in s.needs)]
            for stage in sorted(ready, key=lambda s: -s.cost)[: workers - len(running)]:
                if failure is None:
                    pending.remove(stage)
                    needs = {need: results[need] for need in stage.needs}
                    running[pool.submit(stage.run, needs)] = stage
                    print(f"started {stage.name}", flush=True)
            if not running:
                raise ValueError(f"stages wait on each other: {[s.name for s in pending]}")
            done, _ = wait(running, return_when=FIRST_COMPLETED)
            for future in done:
                stage = running.pop(future)
                try:
                    result = future.result()
                except Exception as error:  # the others finish first
                    print(f"stage {stage.name} failed: {error}", file=sys.stderr, flush=True)
                    failure = failure or error
                    continue
                write_atomically(folder / f"{stage.name}.json", json.dumps(result))
                results[stage.name] = result
                tail = stage.summary(result) if stage.summary else ""
                print(f"[{len(results)}/{len(stages)}] {stage.name} {tail}".rstrip(), flush=True)
    if failure is not None:
        raise failure
    return results


def keep_settings(out: Path, settings: dict[str, Any]) -> None:
    """Records the settings in OUT/settings.json; stops if OUT holds stages made with others
    (their results would be mixed into this run's)."""
    path = out / "settings.json"
    if path.is_file() and json.loads(path.read_text()) != json.loads(json.dumps(settings)):
        raise SystemExit(
            f"{out} holds stages made with other settings ({path}: "
            f"{path.read_text().strip()}); use another --out"
        )
    path.write_text(json.dumps(settings))
