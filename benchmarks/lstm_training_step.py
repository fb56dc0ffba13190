"""The LSTM contextualizer's training step (forward + backward) vs the machine's matmul rate, one
run. Usage:

    python -m benchmarks.lstm_training_step [--rounds 7] [--steps 3] [--batch 32] [--timesteps 40]

Published small size: 2 directions x 2 layers, 1024 cells / 128 projection, inputs of width 128
that need gradients (as the character CNN's output does). Contenders, timed in alternating rounds
(each round: --steps steps of each, in turn), median round per contender:
- `ours_clipped`: `elmo_lstm` with cell and projection clip 3 (the published models');
- `ours_unclipped`: `elmo_lstm` without clips (torch's fused `nn.LSTM` with `proj_size`);
- `ours_stateful`: `elmo_lstm`'s `stream_layers`, clips 3, every layer's state carried from one
  step to the next, detached (bilm-tf's regime, `elmo_bilm`'s `stateful`);
- `allennlp_elmo_lstm`: allennlp's `ElmoLstm`, clips 3 (its state reset before each step);
- `matmul_torch`: one fp32 2048 x 2048 x 2048 `torch.mm` (MKL);
- `matmul_onednn`: the same product through oneDNN's linear (`onednn_matmul`), which our CPU
  LSTM uses; on some CPUs (AMD EPYC) it runs at twice MKL's rate.
The machine's matmul rate is the faster of the two (`ours_clipped_of_matmul_torch` also
gives our rate against torch.mm's alone, the yardstick before oneDNN was used).
FLOPs come from the LSTM equations: per token, direction and layer the forward pass does
x W_ih (2 * in * 4 cells), h W_hh (2 * proj * 4 cells) and the projection (2 * cells * proj);
the backward pass twice that (input and weight gradients), so a step is 3 x forward. Elementwise
work is not counted. Times are this process's CPU time (`--clock cpu`, the default: other
processes on a shared machine do not count) or wall time. Ends with one JSON line
(benchmarks/support/common.py): each rate in GFLOP/s and as a fraction of the machine's matmul
rate; a `missed` key and exit status 1 if ours_clipped is under 60% of the matmul rate or slower
than ours_unclipped.
"""

import statistics
from collections.abc import Callable
from typing import Any, Optional, cast

import torch
from allennlp.modules.elmo_lstm import ElmoLstm

from benchmarks.support.common import (
    CLOCKS,
    Declaration,
    benchmark_parser,
    parse_as_command,
    run_benchmark,
)
from elmo_plugin.cpu.onednn_matmul import linear
from elmo_plugin.modules.elmo_lstm import ElmoLstmContextualizer

NAME = "lstm_training_step"

PROJECTION, CELLS, LAYERS, DIRECTIONS, CLIP = 128, 1024, 2, 2, 3.0
MATMUL_SIZE = 2048
TARGET = 0.6


def training_flops(batch: int, timesteps: int) -> float:
    per_token = 2 * PROJECTION * 4 * CELLS + 2 * PROJECTION * 4 * CELLS + 2 * CELLS * PROJECTION
    return 3.0 * per_token * batch * timesteps * DIRECTIONS * LAYERS


def ours(clip: bool, inputs: torch.Tensor, mask: torch.Tensor) -> Callable[[], object]:
    clips = CLIP if clip else None
    lstm = ElmoLstmContextualizer(
        PROJECTION, CELLS, LAYERS, cell_clip=clips, proj_clip=clips, return_all_layers=True
    ).train()

    def step() -> None:
        torch.stack([layer.sum() for layer in lstm(inputs, mask)]).sum().backward()

    return step


def ours_stateful(inputs: torch.Tensor, mask: torch.Tensor) -> Callable[[], object]:
    lstm = ElmoLstmContextualizer(PROJECTION, CELLS, LAYERS, cell_clip=CLIP, proj_clip=CLIP).train()
    # Each direction reads its own text: (directions, batch, timesteps, dim).
    streams = torch.stack([inputs.detach(), inputs.detach().flip(1)]).requires_grad_()
    carried: list[Optional[list[tuple[torch.Tensor, torch.Tensor]]]] = [None]

    def step() -> None:
        layers, final = lstm.stream_layers(streams, cast(torch.BoolTensor, mask), carried[0])
        carried[0] = [(h.detach(), c.detach()) for h, c in final]
        torch.stack([layer.sum() for layer in layers]).sum().backward()

    return step


def allennlp_elmo_lstm(inputs: torch.Tensor, mask: torch.Tensor) -> Callable[[], object]:
    lstm = ElmoLstm(
        PROJECTION,
        PROJECTION,
        CELLS,
        LAYERS,
        requires_grad=True,
        memory_cell_clip_value=CLIP,
        state_projection_clip_value=CLIP,
    ).train()

    def step() -> None:
        lstm.reset_states()
        lstm(inputs, mask).sum().backward()

    return step


def matmul(onednn: bool) -> Callable[[], object]:
    left, right = torch.randn(MATMUL_SIZE, MATMUL_SIZE), torch.randn(MATMUL_SIZE, MATMUL_SIZE)
    if onednn:
        return lambda: linear(left, right.t())
    return lambda: torch.mm(left, right)


DECLARATION = Declaration(
    quick=["--rounds", "3", "--steps", "1"],
    cheapest=["--clock", "sundial"],
    cheapest_status="failed",
)


def main(argv: list[str]) -> dict[str, Any]:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--steps", type=int, default=3, help="steps of each contender per round")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--timesteps", type=int, default=40)
    parser.add_argument("--clock", choices=list(CLOCKS), default="cpu")
    args = parse_as_command(parser, argv)
    clock = CLOCKS[args.clock]

    torch.manual_seed(0)
    inputs = torch.randn(args.batch, args.timesteps, PROJECTION, requires_grad=True)
    mask = torch.ones(args.batch, args.timesteps, dtype=torch.bool)
    contenders: dict[str, Callable[[], object]] = {
        "ours_clipped": ours(True, inputs, mask),
        "ours_unclipped": ours(False, inputs, mask),
        "ours_stateful": ours_stateful(inputs, mask),
        "allennlp_elmo_lstm": allennlp_elmo_lstm(inputs, mask),
        "matmul_torch": matmul(onednn=False),
        "matmul_onednn": matmul(onednn=True),
    }
    flops = {name: training_flops(args.batch, args.timesteps) for name in contenders}
    flops["matmul_torch"] = flops["matmul_onednn"] = 2.0 * MATMUL_SIZE**3
    seconds: dict[str, list] = {name: [] for name in contenders}
    for run in contenders.values():  # warm-up, not timed
        run()
    for _ in range(args.rounds):
        for name, run in contenders.items():
            start = clock()
            for _ in range(args.steps):
                run()
            seconds[name].append((clock() - start) / args.steps)
    rates = {name: flops[name] / statistics.median(times) / 1e9 for name, times in seconds.items()}
    rates["matmul"] = max(rates["matmul_torch"], rates["matmul_onednn"])
    result: dict[str, Any] = {
        "headline": ["ours_clipped_of_matmul", "clipped_vs_unclipped"],
        "shape": f"batch {args.batch} x {args.timesteps} tokens, "
        f"{DIRECTIONS} directions x {LAYERS} layers, {CELLS} cells / {PROJECTION} projection",
        "torch_threads": torch.get_num_threads(),
        "keep_freed_heap": args.keep_freed_heap,
        "clock": args.clock,
        "rounds": args.rounds,
        **{f"{name}_gflops": round(rate, 1) for name, rate in rates.items()},
        **{
            f"{name}_of_matmul": round(rates[name] / rates["matmul"], 3)
            for name in contenders
            if not name.startswith("matmul")
        },
        "ours_clipped_of_matmul_torch": round(rates["ours_clipped"] / rates["matmul_torch"], 3),
        "clipped_vs_unclipped": round(rates["ours_clipped"] / rates["ours_unclipped"], 3),
        "clipped_vs_allennlp": round(rates["ours_clipped"] / rates["allennlp_elmo_lstm"], 3),
        "stateful_vs_clipped": round(rates["ours_stateful"] / rates["ours_clipped"], 3),
    }
    if result["ours_clipped_of_matmul"] < TARGET or result["clipped_vs_unclipped"] < 1.0:
        result["missed"] = (
            f"target ours_clipped_of_matmul >= {TARGET} and clipped_vs_unclipped >= 1"
        )
    return result


if __name__ == "__main__":
    run_benchmark(NAME, main)
