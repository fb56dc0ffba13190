#!/usr/bin/env bash
# On the GPU machine, from the repo root, with .gpu_bundle/ (scripts/gpu_bundle.sh) beside it:
#   bash scripts/gpu_run.sh [tests] [bench] [train]      (default: all three, in one call)
# installs the project into a venv over the image's torch, then
#   tests: the CUDA tests (tests/cuda) and the modules' and model's tests on this torch;
#   bench: python -m benchmarks.gpu_original_elmo (full size, fp32 / tf32 / bf16, elmo-embed vs Elmo);
#   train: `allennlp train elmo_lstm_original.jsonnet` at full size on ~200 batches of 1B
#          Word-shaped text with the 793,471-word tokens.txt, then `allennlp evaluate` on a
#          held-out shard, both on cuda:0.
# Logs and results go to $OUT (default gpu_out/); the end of each log is printed. Scratch data and
# the training run go to $SCRATCH (default $OUT/scratch); the venv to $GPU_VENV (default .venv-gpu/).
# TEST_PATHS picks the tests (default the three folders above), TRAIN_TOKENS the training text's
# size (default 380000: ~150 batches), BENCH_ARGS adds arguments to the benchmark.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-gpu_out}
SCRATCH=${SCRATCH:-$OUT/scratch}
mkdir -p "$OUT" "$SCRATCH"
STAGES=${*:-tests bench train}
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false PYTHONWARNINGS=ignore
status=0

nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.max.sm --format=csv | tee "$OUT/gpu.txt"
VENV=${GPU_VENV:-.venv-gpu}
if [[ ! -f $VENV/.ready ]]; then  # a machine kept warm between calls keeps its venv
  bash scripts/gpu_install.sh > "$OUT/install.log" 2>&1 || { tail -40 "$OUT/install.log"; exit 1; }
  tail -6 "$OUT/install.log" && touch "$VENV/.ready"
fi
# shellcheck disable=SC1091
source "$VENV/bin/activate"

stage() { [[ " $STAGES " == *" $1 "* ]]; }

if stage tests; then
  echo "== tests"
  python -m pytest ${TEST_PATHS:-tests/cuda tests/modules tests/models} -q -rs -p no:cacheprovider > "$OUT/tests.log" 2>&1 || status=1
  tail -15 "$OUT/tests.log"
fi

if stage smoke; then  # a few steps of every benchmark path, to catch errors cheaply
  echo "== smoke"
  python -m benchmarks.gpu_original_elmo --steps 5 --warmup 2 --profile-steps 2 --embed-tokens 5000 \
    > "$OUT/smoke.log" 2>&1 || status=1
  tail -12 "$OUT/smoke.log"
fi

if stage bench; then
  echo "== bench"
  python -m benchmarks.gpu_original_elmo --out "$OUT" ${BENCH_ARGS:-} > "$OUT/bench.log" 2>&1 || status=1
  tail -25 "$OUT/bench.log"
fi

if stage train; then
  echo "== train"
  data=$SCRATCH/elmo_scale && rm -rf "$data" && mkdir -p "$data"
  python scripts/make_scale_corpus.py --tokens "${TRAIN_TOKENS:-380000}" --shards 4 --out "$data/train" --seed 1 > /dev/null
  python scripts/make_scale_corpus.py --tokens 20000 --shards 1 --out "$data/heldout" --seed 2 > /dev/null
  run=$SCRATCH/elmo_original_run && rm -rf "$run"
  # a torch before 2.14 cannot clip the sparse softmax's gradients: train unclipped there
  clip=$(python -c 'from elmo_plugin.training.sparse_gradient_sync import torch_norms_sparse_gradients as ok
print("" if ok() else ", \"trainer.grad_norm\": false")')
  [[ -z $clip ]] || echo "train: this torch cannot clip sparse gradients: trainer.grad_norm false"
  values=$(printf '{"train_data_path": "%s/train/*.txt", "validation_data_path": "%s/heldout/*.txt", "vocabulary": {"type": "elmo_tokens_file", "tokens_file": "%s/tokens.txt"}, "trainer.num_epochs": 1, "data_loader.num_workers": 2, %s%s}' \
    "$data" "$data" "$data" "${TRAIN_MODEL_ARGS:-\"trainer.callbacks.0.tf32\": true, \"evaluation.tf32\": true, \"model.mixed_precision\": \"bf16\"}" "$clip")
  start=$(date +%s)
  allennlp train training_config/elmo_lstm_original.jsonnet -s "$run" -o "$values" > "$OUT/train.log" 2>&1 || status=1
  echo "train wall s: $(( $(date +%s) - start ))"
  grep -E "Epoch 0|accuracy|perplexity|batch_loss" "$OUT/train.log" | tail -5
  cp "$run/metrics.json" "$OUT/train_metrics.json" 2>/dev/null && cat "$OUT/train_metrics.json"
  allennlp evaluate "$run/model.tar.gz" "$data/heldout/*.txt" --cuda-device 0 --output-file "$OUT/evaluate.json" \
    > "$OUT/evaluate.log" 2>&1 || status=1
  tail -3 "$OUT/evaluate.log"; cat "$OUT/evaluate.json" 2>/dev/null
fi
exit $status
