"""`elmo-embed`'s output options on real text: tokens/s, output bytes and the error float16 costs,
and two shards on two processes vs one process. One run. Usage:

    python -m benchmarks.elmo_embed_options [--lines 2000] [--seed 0]

Input: the first --lines lines of WikiText-2 valid.txt as they are (blank and heading lines
included), from $ELMO_PLUGIN_DATA (default ../shared/data); without it, one JSON line with status
"skipped". Model: the published small size (2 x 1024/128, 2048 filters, 1 highway), random
weights, written as options.json + weights.hdf5. Each option set is `embed_file` in this process
on one torch thread (`--layers all`), after a warm-up run on 20 lines; tokens/s is wall time.
Errors: max abs difference of each file's values from the float32 run of the same pooling (max
abs value of that run given for scale). Shards: `allennlp elmo-embed` processes
(OMP_NUM_THREADS=1 each, `--sort-window 512` so that each shard gets windows): one process
over the whole input vs `--shard 0/2` and `--shard 1/2` at the same time; wall time from start
to the last exit, process start-up included. The last line printed is one JSON object.
"""

import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import h5py
import numpy
import torch

import elmo_plugin  # noqa: F401  (registers components)
from benchmarks.embedder_vs_allennlp_elmo import PUBLISHED_SMALL, write_random_elmo
from benchmarks.support.child import Child
from benchmarks.support.common import (
    Declaration,
    allennlp_command,
    benchmark_parser,
    require_data,
    run_benchmark,
)
from benchmarks.support.wikitext_data import WIKITEXT, wikitext_file
from elmo_plugin.commands.elmo_embed import OutputFormat, embed_file
from elmo_plugin.elmo_files.weights import read_bilm_encoder

NAME = "elmo_embed_options"
RUNS = {
    "float32_none": OutputFormat(),
    "float16_gzip_none": OutputFormat(dtype="float16", compression="gzip"),
    "float32_mean": OutputFormat(pool="mean"),
    "float16_mean": OutputFormat(pool="mean", dtype="float16"),
    "float16_gzip_mean": OutputFormat(pool="mean", dtype="float16", compression="gzip"),
}


def datasets(path: str) -> dict[str, numpy.ndarray]:
    with h5py.File(path, "r") as output:
        return {name: output[name][()] for name in output if name != "sentence_to_index"}


def max_abs_error(path: str, reference: dict[str, numpy.ndarray]) -> float:
    values = datasets(path)
    return max(
        (
            float(numpy.abs(values[k].astype(numpy.float64) - v).max(initial=0))
            for k, v in reference.items()
        ),
        default=0.0,
    )


def cli_embed(model: str, input_file: str, output: str, *options: str) -> Child:
    """`allennlp elmo-embed` on one thread, started; its log beside `output`."""
    command = allennlp_command("elmo-embed", model, input_file, output, *options)
    return Child(command, Path(output).with_suffix(".log"), {"OMP_NUM_THREADS": "1"})


def embedded_lines(path: str) -> int:
    """How many input lines (blank ones too) an elmo-embed output file holds."""
    with h5py.File(path, "r") as output:
        return sum(1 for key in output if key != "sentence_to_index")


def wall_seconds(children: list[Child]) -> float:
    """Seconds from the first child's start to the last one's exit (`check` waits for each)."""
    for child in children:
        child.check()
    return max(c.start + c.wall_s for c in children) - min(c.start for c in children)


DECLARATION = Declaration(
    quick=["--lines", "300", "--sort-window", "64"],
    data=(WIKITEXT,),
)


def main(argv: list[str]) -> dict[str, Any]:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--lines", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--sort-window",
        type=int,
        default=512,
        help="elmo-embed's --sort-window for the shard comparison: shards take whole windows, "
        "so an input of fewer than 2 windows would leave the second shard empty",
    )
    args = parser.parse_args(argv)
    source = wikitext_file()
    require_data(source)
    torch.set_num_threads(1)
    folder = tempfile.mkdtemp(prefix="elmo_embed_options_")
    try:
        input_file = os.path.join(folder, "input.txt")
        lines = source.read_text(encoding="utf-8").splitlines()[: args.lines]
        Path(input_file).write_text("\n".join(lines) + "\n", encoding="utf-8")
        tokens = sum(len(line.split()) for line in lines)
        model = os.path.join(folder, "model")
        os.mkdir(model)
        encoder = read_bilm_encoder(*write_random_elmo(PUBLISHED_SMALL, model, args.seed))
        warm_up = os.path.join(folder, "warm_up.txt")
        Path(warm_up).write_text("\n".join(lines[:20]) + "\n", encoding="utf-8")
        embed_file(encoder, warm_up, os.path.join(folder, "warm_up.hdf5"))
        figures: dict[str, dict[str, float]] = {}
        references: dict[str, dict[str, numpy.ndarray]] = {}
        for name, form in RUNS.items():
            output = os.path.join(folder, f"{name}.hdf5")
            start = time.perf_counter()
            embed_file(encoder, input_file, output, "all", output_format=form)
            seconds = time.perf_counter() - start
            if form.dtype == "float32":
                references[form.pool] = datasets(output)
            reference = references[form.pool]
            figures[name] = {
                "tokens_per_s": round(tokens / seconds, 1),
                "output_bytes": os.path.getsize(output),
                "max_abs_error_vs_float32": max_abs_error(output, reference),
                "max_abs_value": max(
                    float(numpy.abs(v).max(initial=0)) for v in reference.values()
                ),
            }
        window = ["--sort-window", str(args.sort_window)]
        one_file = os.path.join(folder, "one.hdf5")
        one = wall_seconds([cli_embed(model, input_file, one_file, *window)])
        shard_files = [os.path.join(folder, f"s{i}.hdf5") for i in range(2)]
        shards = [
            cli_embed(model, input_file, shard_files[i], *window, "--shard", f"{i}/2")
            for i in range(2)
        ]
        two = wall_seconds(shards)
        shard_lines = [embedded_lines(path) for path in shard_files]
    finally:
        shutil.rmtree(folder)
    return {
        "data": f"first {args.lines} lines of {source.name} (WikiText-2), {tokens} tokens",
        "model": "published small (2 x 1024/128, 2048 filters, 1 highway), random weights",
        "layers": "all",
        **figures,
        "sort_window": args.sort_window,
        "shard_lines": shard_lines,
        "one_process_wall_s": round(one, 2),
        "two_shards_two_processes_wall_s": round(two, 2),
        "shard_speedup": round(one / two, 2),
        "cpu_count": os.cpu_count(),
        "headline": ["shard_speedup"],
    }


if __name__ == "__main__":
    run_benchmark(NAME, main)
