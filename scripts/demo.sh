#!/usr/bin/env bash
# The main job on bundled data: pretrain the demo-size ELMo biLM, evaluate it, export it to the
# standard ELMo files, embed a few sentences, then train and run a UPOS tagger that uses it.
# CONTEXTUALIZER=transformer pretrains the transformer biLM instead (it has no standard-file
# export, so the tagger reads its archive). Outputs go to $DEMO_OUTPUT (default demo_output/);
# each run's TensorBoard curves are in its log/ folder and the last lines print how to view them.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${DEMO_OUTPUT:-demo_output}
contextualizer=${CONTEXTUALIZER:-lstm}
plugin=(--include-package elmo_plugin)
# allennlp imports fairscale, which prints three harmless FutureWarnings on every command (two
# from fairscale's offload module; torch attributes the third, about fairscale's torch.jit.script
# call, to torch.jit._script): hide exactly these, by message, category and module.
fairscale_notices=(
  'ignore:`torch.cuda.amp.custom_fwd(args...)` is deprecated:FutureWarning:fairscale.experimental.nn.offload'
  'ignore:`torch.cuda.amp.custom_bwd(args...)` is deprecated:FutureWarning:fairscale.experimental.nn.offload'
  'ignore:`torch.jit.script` is deprecated:FutureWarning:torch.jit._script'
)
PYTHONWARNINGS=$(IFS=,; echo "${fairscale_notices[*]}")${PYTHONWARNINGS:+,$PYTHONWARNINGS}
export PYTHONWARNINGS
rm -rf "$out" && mkdir -p "$out/logs"
# Each step: one line, its progress bar while it runs, its key figure; the whole output of each
# command is in $out/logs/.
step() {  # step LOG COMMAND...
  python scripts/demo_step.py "$out/logs/$1.log" "${@:2}"
}

echo "1. pretrain the demo-size $contextualizer ELMo on fixtures/demo_corpus (log: $out/logs/1-train.log)"
step 1-train allennlp train "training_config/elmo_$contextualizer.jsonnet" -s "$out/bilm" "${plugin[@]}"
python -c "
import json, os, sys
m = json.load(open(sys.argv[1] + '/metrics.json'))
checks = sys.argv[1] + '/validation_checks.jsonl'
n = sum(1 for _ in open(checks)) if os.path.exists(checks) else 0
print(f'   best validation perplexity {m[\"best_validation_perplexity\"]:.1f} after {m[\"epoch\"] + 1} epochs'
      + (f'; {n} validation checks inside the epochs (validation_checks.jsonl)' if n else ''))
" "$out/bilm"

echo "2. evaluate it on the held-out shard (log: $out/logs/2-evaluate.log)"
step 2-evaluate allennlp evaluate "$out/bilm/model.tar.gz" "fixtures/demo_corpus/valid/*.txt" \
  --output-file "$out/bilm_metrics.json" "${plugin[@]}"
python -c "
import json, sys; m = json.load(open(sys.argv[1]))
print(f'   perplexity {m[\"perplexity\"]:.1f} (forward {m[\"forward_perplexity\"]:.1f}, backward {m[\"backward_perplexity\"]:.1f})')
" "$out/bilm_metrics.json"

elmo_source="$out/bilm/model.tar.gz"
if [ "$contextualizer" = lstm ]; then
  echo "3. export to the standard ELMo files (log: $out/logs/3-export.log)"
  step 3-export allennlp elmo-export "$out/bilm/model.tar.gz" "$out/elmo" "${plugin[@]}"
  echo "   $out/elmo/: $(cd "$out/elmo" && ls | tr '\n' ' ')"
  elmo_source="$out/elmo"
fi

echo "4. embed a few sentences with every layer (log: $out/logs/4-embed.log)"
printf '%s\n' "Return the value of the named attribute ." "" "Create a new list from the iterable ." \
  "Return the value of the named attribute ." > "$out/sentences.txt"
step 4-embed allennlp elmo-embed "$elmo_source" "$out/sentences.txt" "$out/embeddings.hdf5" --layers all "${plugin[@]}"
python -c "
import h5py, sys
with h5py.File(sys.argv[1]) as f:
    shapes = [f'line {k}: {f[k].shape}' for k in sorted((k for k in f if k.isdigit()), key=int)]
print('   (layers, tokens, dim) per line:', '; '.join(shapes))
" "$out/embeddings.hdf5"

echo "5. train a UPOS tagger (crf_tagger) on the bundled labelled data with this ELMo (log: $out/logs/5-tagger.log)"
step 5-tagger allennlp train training_config/pos_tagger_elmo.jsonnet -s "$out/tagger" "${plugin[@]}" \
  -o "{\"model.text_field_embedder.token_embedders.elmo.pretrained_file\": \"$elmo_source\"}"
python -c "
import json, sys; m = json.load(open(sys.argv[1]))
print(f'   validation accuracy {m[\"best_validation_accuracy\"]:.3f}: the bundled sentences come from a small template')
print('   grammar, so this shows the pipeline working end to end, not what ELMo adds (docs/benchmarks.md measures that)')
" "$out/tagger/metrics.json"

echo "6. tag two sentences with allennlp predict (log: $out/logs/6-predict.log)"
printf '%s\n' '{"sentence": "Return the name of the file ."}' '{"tokens": ["Create", "a", "new", "list", "."]}' > "$out/tag_input.jsonl"
step 6-predict allennlp predict "$out/tagger/model.tar.gz" "$out/tag_input.jsonl" --predictor whitespace_tagger \
  --output-file "$out/tags.jsonl" --silent "${plugin[@]}"
python -c "
import json, sys
for line in open(sys.argv[1]):
    p = json.loads(line); print('   ' + ' '.join(f'{w}/{t}' for w, t in zip(p['words'], p['tags'])))
" "$out/tags.jsonl"
echo "demo done: outputs in $out/, each step's whole log in $out/logs/"
logdir=$(cd "$out" && pwd)
echo "watch the curves (perplexities, loss, learning rate, tokens/s, tagger accuracy and ELMo mix weights):"
if command -v tensorboard > /dev/null; then
  echo "   tensorboard --logdir $logdir"
else
  echo "   ~/.tensorboard-venv/bin/tensorboard --logdir $logdir   # then open http://localhost:6006"
  [ -x ~/.tensorboard-venv/bin/tensorboard ] || echo "   (install it once: python3 -m venv ~/.tensorboard-venv && ~/.tensorboard-venv/bin/pip install tensorboard)"
fi
