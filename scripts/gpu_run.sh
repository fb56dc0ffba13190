#!/usr/bin/env bash
# On the GPU machine, from the repo root, with .gpu_bundle/ (scripts/gpu_bundle.sh) beside it:
#   bash scripts/gpu_run.sh [tests] [train] [bench]      (default: all three, in this order)
# installs the project into a venv over the image's torch, then
#   tests: the CUDA tests (tests/cuda: components, the CLI on cuda:0, a step under
#          set_sync_debug_mode("error")) and the step audit on this torch;
#   train: `allennlp train elmo_lstm_original.jsonnet` with the elmo_graph_step trainer at full
#          size on ~150 batches of 1B Word-shaped text with the 793,471-word tokens.txt, then
#          `allennlp evaluate` on a held-out shard, both on cuda:0;
#   bench: python -m benchmarks.gpu_original_elmo at full size, TF32 and bf16, batches of 128
#          and 384 windows, each eager and on elmo_graph_step's CUDA graph (with the graph's
#          losses against eager ones on the same batches), the dense softmax beside the row
#          gradients, elmo-embed vs Elmo (results.json after each measurement); first the same
#          benchmark of the code in .gpu_baseline/ (the step before, made by
#          scripts/gpu_bundle.sh) at 128, so each run prints its speed against it.
# Logs and results go to $OUT (default gpu_out/); the end of each log is printed. Scratch data and
# the training run go to $SCRATCH (default $OUT/scratch); the venv to $GPU_VENV (default .venv-gpu/).
# TEST_PATHS picks the tests (default the two above), TRAIN_TOKENS the training text's size
# (default 380000: ~150 batches), BENCH_STEPS the benchmark's step counts, BENCH_ARGS adds
# arguments to it.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=$(realpath -m "${OUT:-gpu_out}")
SCRATCH=${SCRATCH:-$OUT/scratch}
mkdir -p "$OUT" "$SCRATCH"
STAGES=${*:-tests train bench}
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
  python -m pytest ${TEST_PATHS:-tests/cuda tests/benchmarks/test_step_audit.py} -q -rs -p no:cacheprovider > "$OUT/tests.log" 2>&1 || status=1
  tail -15 "$OUT/tests.log"
fi

if stage smoke; then  # a few steps of every benchmark path, to catch errors cheaply
  echo "== smoke"
  python -m benchmarks.gpu_original_elmo --steps 5 --warmup 2 --profile-steps 2 --embed-tokens 5000 \
    --precisions tf32 --batch-sizes 128 \
    > "$OUT/smoke.log" 2>&1 || status=1
  tail -12 "$OUT/smoke.log"
fi

if stage train; then
  echo "== train"
  data=$SCRATCH/elmo_scale && rm -rf "$data" && mkdir -p "$data"
  python scripts/make_scale_corpus.py --tokens "${TRAIN_TOKENS:-380000}" --shards 4 --out "$data/train" --seed 1 > /dev/null
  python scripts/make_scale_corpus.py --tokens 20000 --shards 1 --out "$data/heldout" --seed 2 > /dev/null
  run=$SCRATCH/elmo_original_run && rm -rf "$run"
  values=$(printf '{"train_data_path": "%s/train/*.txt", "validation_data_path": "%s/heldout/*.txt", "vocabulary": {"type": "elmo_tokens_file", "tokens_file": "%s/tokens.txt"}, "trainer.num_epochs": 1, "data_loader.num_workers": 2, %s}' \
    "$data" "$data" "$data" "${TRAIN_MODEL_ARGS:-\"trainer.type\": \"elmo_graph_step\", \"trainer.callbacks.0.tf32\": true, \"evaluation.tf32\": true, \"model.mixed_precision\": \"bf16\"}")
  start=$(date +%s)
  allennlp train training_config/elmo_lstm_original.jsonnet -s "$run" -o "$values" > "$OUT/train.log" 2>&1 || status=1
  echo "train wall s: $(( $(date +%s) - start ))"
  grep -E "elmo_graph_step|Epoch 0|accuracy|perplexity|batch_loss" "$OUT/train.log" | tail -6
  cp "$run/metrics.json" "$OUT/train_metrics.json" 2>/dev/null && cat "$OUT/train_metrics.json"
  allennlp evaluate "$run/model.tar.gz" "$data/heldout/*.txt" --cuda-device 0 --output-file "$OUT/evaluate.json" \
    > "$OUT/evaluate.log" 2>&1 || status=1
  tail -3 "$OUT/evaluate.log"; cat "$OUT/evaluate.json" 2>/dev/null
fi
if stage bench; then
  steps=${BENCH_STEPS:---steps 15 --warmup 5 --profile-steps 3}
  baseline=()
  if [[ -d .gpu_baseline ]]; then
    echo "== baseline"
    (cd .gpu_baseline && PYTHONPATH=$PWD python -m benchmarks.gpu_original_elmo $steps \
      --profile-precision tf32 --precisions tf32,bf16 --no-embed --out "$OUT/baseline") \
      > "$OUT/baseline.log" 2>&1 || status=1
    tail -8 "$OUT/baseline.log"
    [[ -f $OUT/baseline/results.json ]] && baseline=(--baseline "$OUT/baseline/results.json")
  fi
  echo "== bench"
  python -m benchmarks.gpu_original_elmo $steps --precisions tf32,bf16 --batch-sizes 128,384 \
    --dense-softmax --embed-tokens 20000 "${baseline[@]}" --out "$OUT" ${BENCH_ARGS:-} \
    > "$OUT/bench.log" 2>&1 || status=1
  tail -16 "$OUT/bench.log"
fi

exit $status
