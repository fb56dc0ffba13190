"""Every line is read exactly once per epoch across distributed ranks x data-loader workers."""

import json
import os
import sys
from collections import Counter

import torch.distributed as dist
import torch.multiprocessing as mp
from allennlp.data.data_loaders import MultiProcessDataLoader

from elmo_plugin.data.elmo_corpus_reader import ElmoCorpusReader
from tests.helpers import REPO_ROOT, free_port, run_forked, text_tokens

WORLD_SIZE, WORKERS = 2, 2


def read_as_rank(rank: int, pattern: str, out_dir: str, port: int) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=WORLD_SIZE)
    loader = MultiProcessDataLoader(
        ElmoCorpusReader(), pattern, batch_size=4, num_workers=WORKERS, max_instances_in_memory=8
    )
    texts = [
        " ".join(token.ensure_text() for token in text_tokens(instance)[1:-1])
        for instance in loader.iter_instances()
    ]
    with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as out:
        json.dump(texts, out)
    dist.destroy_process_group()


def test_each_line_read_once_across_ranks_and_workers(tmp_path):
    lines = [f"line {i} of shard {s}" for s in range(5) for i in range(17 + s)]
    for shard in range(5):
        shard_lines = [line for line in lines if line.endswith(f"shard {shard}")]
        (tmp_path / f"shard_{shard}.txt").write_text("\n".join(shard_lines) + "\n\n")
    (tmp_path / "shard_9.txt").write_text("")  # an empty shard among them
    command = ["-m", "tests.data.test_elmo_corpus_sharding", str(tmp_path), str(free_port())]
    result = run_forked(command, REPO_ROOT, dict(os.environ, OMP_NUM_THREADS="1"), timeout=300)
    assert result.returncode == 0, result.stderr[-6000:]
    per_rank = [
        json.loads((tmp_path / f"rank{rank}.json").read_text()) for rank in range(WORLD_SIZE)
    ]
    assert all(per_rank), "every rank gets a share"
    assert Counter(text for texts in per_rank for text in texts) == Counter(lines)


if __name__ == "__main__":  # the test's command (tests' warm server: the ranks are its forks)
    folder = sys.argv[1]
    mp.spawn(
        read_as_rank,
        args=(os.path.join(folder, "shard_*.txt"), folder, int(sys.argv[2])),
        nprocs=WORLD_SIZE,
    )
