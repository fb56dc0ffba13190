#!/usr/bin/env bash
# On the GPU machine, from the repo root, with .gpu_bundle/ (scripts/gpu_bundle.sh) beside it:
#   bash scripts/gpu_run.sh [STAGE ...]        (default: smoke tests lstm, one 10-minute call)
#   bash scripts/gpu_run.sh --dry-run [STAGE ...]
# First `setup`: nvidia-smi, and the project installed into a venv over the image's torch
# (scripts/gpu_install.sh; a machine kept warm keeps it). Then the stages, always in this order,
# each writing $OUT/STAGE.log (and the benchmark's $OUT/STAGE/results.json, after each
# measurement) before the next starts:
#   smoke        python -m benchmarks.gpu_original_elmo on elmo_lstm_original.jsonnet in bf16 at
#                batch 128, eager and on elmo_graph_step's CUDA graph (whether it captured, or
#                why not), the dense softmax beside the row gradients, peak memory, the graph's
#                losses against eager ones; few steps, no embedding;
#   tests        the CUDA tests (TEST_PATHS, default tests/cuda);
#   baseline     the same benchmark of the code in .gpu_baseline/ (scripts/gpu_bundle.sh: the
#                step before), both configs, TF32 and bf16: lstm and transformer then print
#                each run's speed against it;
#   lstm         the benchmark of elmo_lstm_original.jsonnet, TF32 and bf16, eager and graph;
#   transformer  the same of elmo_transformer_original.jsonnet;
#   embed        elmo-embed vs allennlp's Elmo (the benchmark's embedding comparison);
#   train        `allennlp train elmo_lstm_original.jsonnet` with elmo_graph_step at full size
#                on ~150 batches of 1B Word-shaped text (793,471-word tokens.txt), then
#                `allennlp evaluate` on a held-out shard, both on cuda:0.
# Each stage has an estimate of its seconds (ESTIMATE below: a guess for an H100 / H200 until a
# run's $OUT/stages.tsv, estimate beside the wall time of each stage, corrects it). The default
# stages fit one call's 600 s with setup; a stage starts only if its estimate fits in what is
# left of BUDGET_S (default 585) and is interrupted when the budget runs out, with a line
# saying so either way. --dry-run prints the stages, their commands and estimates and runs
# the smoke shrunk on this machine (a CPU too; with `python` the project's venv): nothing is
# installed, nothing needs a GPU.
# Logs and results go to $OUT (default gpu_out/), scratch data and the training run to $SCRATCH
# (default $OUT/scratch), the venv to $GPU_VENV (default .venv-gpu/). BENCH_ARGS adds arguments
# to the lstm and transformer benchmarks (e.g. "--batch-sizes 128,384"), TRAIN_TOKENS sets the
# training text's size (default 380000: ~150 batches). Python's warnings and torch.compile's
# recompiles are shown (but for allennlp's three import notices).
set -uo pipefail
cd "$(dirname "$0")/.."

ORDER=(smoke tests baseline lstm transformer embed train)
DEFAULT=(smoke tests lstm)
# Seconds, by hand until measured: a benchmark process ~20 (imports, corpus, 793k-word
# vocabulary, matmul rate); a training run ~30 (the 500M-parameter model built: 9 s on a 2-core
# CPU; torch.compile of the LSTM's steps, cold in the first run; the FLOP count; the profile)
# plus its steps at ~0.2 s (the host-bound step before took 0.2-0.3 s on an H100); a
# graph-vs-eager check ~30 (two models, 12 steps); an allennlp process ~10 to start (tests:
# about 12). smoke: 20 + 3 runs of 15 steps + 1 check; lstm: 20 + 4 runs of 27 steps + 2 checks.
declare -A ESTIMATE=(
  [setup]=60 [smoke]=150 [tests]=150 [baseline]=150 [lstm]=220 [transformer]=220 [embed]=90
  [train]=300
)
CALL_S=600
BUDGET_S=${BUDGET_S:-585}
DRY=()
if [[ ${1:-} == --dry-run ]]; then DRY=(--dry-run); shift; fi
for name in "$@"; do
  if [[ $name == setup || -z ${ESTIMATE[$name]+set} ]]; then
    echo "gpu_run: no stage '$name' (stages: ${ORDER[*]})" >&2
    exit 2
  fi
done
asked=" ${*:-${DEFAULT[*]}} "
STAGES=()
for name in "${ORDER[@]}"; do [[ $asked == *" $name "* ]] && STAGES+=("$name"); done

OUT=$(realpath -m "${OUT:-gpu_out}")
SCRATCH=${SCRATCH:-$OUT/scratch}
mkdir -p "$OUT" "$SCRATCH"
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
# Python's warnings are shown but the three notices allennlp's imports print (as scripts/demo.sh)
import_notices=(
  'ignore:`torch.cuda.amp.custom_fwd(args...)` is deprecated:FutureWarning:fairscale.experimental.nn.offload'
  'ignore:`torch.cuda.amp.custom_bwd(args...)` is deprecated:FutureWarning:fairscale.experimental.nn.offload'
  'ignore:`torch.jit.script` is deprecated:FutureWarning:torch.jit._script'
)
PYTHONWARNINGS=$(IFS=,; echo "${import_notices[*]}")${PYTHONWARNINGS:+,$PYTHONWARNINGS}
export PYTHONWARNINGS
DEADLINE=$(( SECONDS + BUDGET_S ))
BENCH=(python -m benchmarks.gpu_original_elmo)

bench_args() {  # STAGE -> ARGS: the benchmark's options of a benchmark stage
  case $1 in
    smoke) ARGS=(--configs lstm --precisions bf16 --batch-sizes 128 --steppers eager,graph
                 --dense-softmax --steps 10 --warmup 4 --profile-steps 1 --no-embed) ;;
    baseline) ARGS=(--configs lstm,transformer --precisions tf32,bf16 --profile-precision tf32
                    --steps 15 --warmup 5 --profile-steps 2 --no-embed) ;;
    lstm | transformer) ARGS=(--configs "$1" --precisions tf32,bf16 --batch-sizes 128
                              --steppers eager,graph --steps 20 --warmup 5 --profile-steps 2
                              --no-embed) ;;
    embed) ARGS=(--configs= --precisions tf32,bf16 --embed-tokens 20000) ;;
  esac
}

describe() {  # STAGE -> what it runs, one line
  case $1 in
    setup) echo "nvidia-smi; bash scripts/gpu_install.sh (where ${GPU_VENV:-.venv-gpu}/ is not ready)" ;;
    tests) echo "python -m pytest ${TEST_PATHS:-tests/cuda} -q -rs" ;;
    train) echo "allennlp train training_config/elmo_lstm_original.jsonnet (elmo_graph_step, bf16);" \
                "allennlp evaluate" ;;
    baseline) bench_args "$1"; echo "(cd .gpu_baseline && ${BENCH[*]} ${ARGS[*]})" ;;
    *) bench_args "$1"; echo "${BENCH[*]} ${ARGS[*]}" ;;
  esac
}

limited() {  # COMMAND... -> runs it, interrupted (then killed) where the budget runs out
  local left=$(( DEADLINE - SECONDS ))
  (( left > 0 )) || return 124
  timeout --signal=INT --kill-after=10 "$left" "$@"
}

stage_smoke() { bench_args smoke; limited "${BENCH[@]}" "${ARGS[@]}" "${DRY[@]}" --out "$OUT/smoke"; }

stage_tests() {
  # shellcheck disable=SC2086
  limited python -m pytest ${TEST_PATHS:-tests/cuda} -q -rs -p no:cacheprovider
}

stage_baseline() {
  bench_args baseline
  (cd .gpu_baseline && limited env PYTHONPATH="$PWD" "${BENCH[@]}" "${ARGS[@]}" --out "$OUT/baseline")
}

config_bench() {  # STAGE: the benchmark of one config, against the baseline's runs if there are
  bench_args "$1"
  local against=()
  [[ -f $OUT/baseline/results.json ]] && against=(--baseline "$OUT/baseline/results.json")
  # shellcheck disable=SC2086
  limited "${BENCH[@]}" "${ARGS[@]}" "${against[@]}" --out "$OUT/$1" ${BENCH_ARGS:-}
}

stage_lstm() { config_bench lstm; }
stage_transformer() { config_bench transformer; }
stage_embed() { bench_args embed; limited "${BENCH[@]}" "${ARGS[@]}" --out "$OUT/embed"; }

stage_train() {
  local data=$SCRATCH/elmo_scale run=$SCRATCH/elmo_original_run status=0 values start
  rm -rf "$data" "$run" && mkdir -p "$data"
  limited python scripts/make_scale_corpus.py --tokens "${TRAIN_TOKENS:-380000}" --shards 4 \
    --out "$data/train" --seed 1 > /dev/null || return 1
  limited python scripts/make_scale_corpus.py --tokens 20000 --shards 1 --out "$data/heldout" \
    --seed 2 > /dev/null || return 1
  values=$(printf '{"train_data_path": "%s/train/*.txt", "validation_data_path": "%s/heldout/*.txt", "vocabulary": {"type": "elmo_tokens_file", "tokens_file": "%s/tokens.txt"}, "trainer.num_epochs": 1, "data_loader.num_workers": 2, %s}' \
    "$data" "$data" "$data" "${TRAIN_MODEL_ARGS:-\"trainer.type\": \"elmo_graph_step\", \"trainer.callbacks.0.tf32\": true, \"evaluation.tf32\": true, \"model.mixed_precision\": \"bf16\"}")
  start=$SECONDS
  TORCH_LOGS=recompiles limited allennlp train training_config/elmo_lstm_original.jsonnet \
    -s "$run" -o "$values" > "$OUT/train_allennlp.log" 2>&1 || status=1
  echo "train wall s: $(( SECONDS - start ))"
  grep -E "elmo_graph_step|Epoch 0|accuracy|perplexity|batch_loss|[Rr]ecompil" "$OUT/train_allennlp.log" | tail -8
  cp "$run/metrics.json" "$OUT/train_metrics.json" && cat "$OUT/train_metrics.json"
  TORCH_LOGS=recompiles limited allennlp evaluate "$run/model.tar.gz" "$data/heldout/*.txt" \
    --cuda-device 0 --output-file "$OUT/evaluate.json" > "$OUT/evaluate.log" 2>&1 || status=1
  tail -3 "$OUT/evaluate.log"
  cat "$OUT/evaluate.json" || status=1
  return $status
}

record() {  # STAGE WALL_S RESULT -> a line of $OUT/stages.tsv
  printf '%s\t%s\t%s\t%s\n' "$1" "${ESTIMATE[$1]}" "$2" "$3" >> "$OUT/stages.tsv"
}

warnings_in() {  # LOG -> its distinct warning and recompile lines, most frequent first
  grep -E "Warning|WARNING|[Rr]ecompil|torch._dynamo hit" "$1" | sed -E 's#^.*site-packages/##' |
    sort | uniq -c | sort -rn | head -8 | sed 's/^/  warning: /'
}

status=0
run_stage() {  # STAGE: run where its estimate fits in the budget left, logged and recorded
  local name=$1 start=$SECONDS left=$(( DEADLINE - SECONDS )) rc result
  if (( ESTIMATE[$name] > left )); then
    echo "== $name: skipped, its estimate ${ESTIMATE[$name]} s is more than the ${left} s left"
    record "$name" - skipped
    return
  fi
  echo "== $name (estimate ${ESTIMATE[$name]} s)"
  "stage_$name" > "$OUT/$name.log" 2>&1
  rc=$?
  # a benchmark that found no GPU ends well, with a JSON line saying it skipped
  (( rc == 0 )) && grep -q '^{"name": .*"status": "skipped"' "$OUT/$name.log" && rc=skipped
  case $rc in
    0) result=ok ;;
    skipped) result="skipped by the benchmark" && status=1 ;;
    124 | 130 | 137) result="interrupted at the budget's end" && status=1 ;;
    *) result="failed (exit status $rc)" && status=1 ;;
  esac
  record "$name" $(( SECONDS - start )) "$result"
  # the log's end but the benchmark's JSON lines, then the start of its last one (its status)
  grep -v '^{' "$OUT/$name.log" | tail -n 14
  grep '^{"name": ' "$OUT/$name.log" | tail -n 1 | cut -c 1-400
  warnings_in "$OUT/$name.log"
  echo "== $name: $result, $(( SECONDS - start )) s (estimate ${ESTIMATE[$name]} s)"
}

printf 'stage\testimate_s\twall_s\tresult\n' > "$OUT/stages.tsv"
if (( ${#DRY[@]} )); then
  total=${ESTIMATE[setup]}
  echo "gpu_run --dry-run: the stages of this call, in order, with their estimates (s):"
  printf '%-12s %6s  %s\n' setup "${ESTIMATE[setup]}" "$(describe setup)"
  for name in "${STAGES[@]}"; do
    printf '%-12s %6s  %s\n' "$name" "${ESTIMATE[$name]}" "$(describe "$name")"
    total=$(( total + ESTIMATE[$name] ))
  done
  printf '%-12s %6s  of the %s s of one call (a stage starts where its estimate fits in BUDGET_S=%s)\n' \
    total "$total" "$CALL_S" "$BUDGET_S"
  for name in "${ORDER[@]}"; do
    [[ " ${STAGES[*]} " == *" $name "* ]] || echo "not in this call: $name ${ESTIMATE[$name]}"
  done
  if [[ " ${STAGES[*]} " == *" smoke "* ]]; then
    echo "the smoke, shrunk on this machine (${BENCH[*]} --dry-run):"
    run_stage smoke
  fi
  exit $status
fi

start=$SECONDS
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.max.sm --format=csv | tee "$OUT/gpu.txt"
VENV=${GPU_VENV:-.venv-gpu}
if [[ ! -f $VENV/.ready ]]; then
  bash scripts/gpu_install.sh > "$OUT/install.log" 2>&1 || { tail -40 "$OUT/install.log"; exit 1; }
  tail -6 "$OUT/install.log" && touch "$VENV/.ready"
fi
record setup $(( SECONDS - start )) ok
# shellcheck disable=SC1091
source "$VENV/bin/activate"

for name in "${STAGES[@]}"; do run_stage "$name"; done
column -t -s $'\t' "$OUT/stages.tsv" 2> /dev/null || cat "$OUT/stages.tsv"
exit $status
