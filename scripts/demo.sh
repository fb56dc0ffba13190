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
rm -rf "$out" && mkdir -p "$out"

echo "== 1. pretrain the demo-size $contextualizer ELMo on fixtures/demo_corpus"
allennlp train "training_config/elmo_$contextualizer.jsonnet" -s "$out/bilm" "${plugin[@]}"

echo "== 2. evaluate it on the held-out shard"
allennlp evaluate "$out/bilm/model.tar.gz" "fixtures/demo_corpus/valid/*.txt" \
  --output-file "$out/bilm_metrics.json" "${plugin[@]}"
cat "$out/bilm_metrics.json"; echo

elmo_source="$out/bilm/model.tar.gz"
if [ "$contextualizer" = lstm ]; then
  echo "== 3. export to options.json + weights.hdf5 (+ vocab.txt, softmax.hdf5)"
  allennlp elmo-export "$out/bilm/model.tar.gz" "$out/elmo" "${plugin[@]}"
  ls -l "$out/elmo"
  elmo_source="$out/elmo"
fi

echo "== 4. embed a few sentences with every layer"
printf '%s\n' "Return the value of the named attribute ." "" "Create a new list from the iterable ." \
  "Return the value of the named attribute ." > "$out/sentences.txt"
allennlp elmo-embed "$elmo_source" "$out/sentences.txt" "$out/embeddings.hdf5" --layers all "${plugin[@]}"
python -c "
import h5py, json, sys
with h5py.File(sys.argv[1]) as f:
    for key in sorted(k for k in f if k.isdigit()): print('line', key, 'embedding shape', f[key].shape)
    print('sentence_to_index', json.loads(f['sentence_to_index'][0]))
" "$out/embeddings.hdf5"

echo "== 5. train a UPOS tagger (crf_tagger) on bundled labelled data with this ELMo"
allennlp train training_config/pos_tagger_elmo.jsonnet -s "$out/tagger" "${plugin[@]}" \
  -o "{\"model.text_field_embedder.token_embedders.elmo.pretrained_file\": \"$elmo_source\"}"
python -c "import json; m = json.load(open('$out/tagger/metrics.json')); print('tagger validation accuracy', m['best_validation_accuracy'])"

echo "== 6. tag two sentences with allennlp predict"
printf '%s\n' '{"sentence": "Return the name of the file ."}' '{"tokens": ["Create", "a", "new", "list", "."]}' > "$out/tag_input.jsonl"
allennlp predict "$out/tagger/model.tar.gz" "$out/tag_input.jsonl" --predictor whitespace_tagger \
  --output-file "$out/tags.jsonl" --silent "${plugin[@]}"
python -c "
import json
for line in open('$out/tags.jsonl'):
    p = json.loads(line); print(list(zip(p['words'], p['tags'])))
"
echo "== demo done: outputs in $out/"
logdir=$(cd "$out" && pwd)
echo "== watch the curves (perplexities, loss, learning rate, tokens/s, tagger accuracy and ELMo mix weights):"
if command -v tensorboard > /dev/null; then
  echo "   tensorboard --logdir $logdir"
else
  echo "   ~/.tensorboard-venv/bin/tensorboard --logdir $logdir   # then open http://localhost:6006"
  [ -x ~/.tensorboard-venv/bin/tensorboard ] || echo "   (install it once: python3 -m venv ~/.tensorboard-venv && ~/.tensorboard-venv/bin/pip install tensorboard)"
fi
