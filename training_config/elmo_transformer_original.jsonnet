// The published transformer ELMo (Peters et al., 2018b, "Dissecting Contextual Word
// Embeddings") for GPU runs: elmo_lstm_original.jsonnet (reader, indexers, 2048-filter
// character CNN with 2 highway layers, sampled softmax with 8192 negatives, dropout 0.1,
// windows of 20 tokens, batch 128) with 6 transformer layers per direction of 512 dims,
// 8 heads, feed-forward 2048, and Adam with the inverse-square-root ("noam") warm-up schedule.
// Every training batch has one shape, 128 x 22 tokens (data_loader.fixed_shape), padded.
// Reference figures (tokens/s, memory): not measured yet on a GPU.
// Data: your own shards, e.g.
//   -o '{"train_data_path": "corpus/train/*.txt", "validation_data_path": "corpus/valid.txt"}'
// For a big corpus count the vocabulary once with `allennlp elmo-vocab` and add
//   "vocabulary": {"type": "elmo_tokens_file", "tokens_file": "tokens.txt"}
// For several GPUs add "distributed": {"cuda_devices": [0, 1, 2]}. All overrides go in one
// -o object: allennlp keeps only the last -o (docs/scaling.md).
local lstm = import 'elmo_lstm_original.jsonnet';

lstm {
  // The heap setting is for the LSTM's CPU steps: left off here (README: Process settings).
  process_settings:: { keep_freed_heap: false, tf32: null },
  model+: {
    contextualizer: {
      type: 'elmo_transformer',
      input_dim: 512,
      feedforward_hidden_dim: 2048,
      num_layers: 6,
      num_attention_heads: 8,
      dropout: 0.1,
      input_dropout: 0.1,
      backward_positions: 'from_start',  // as allennlp-models; "from_end": strict right-to-left
    },
  },
  // The elmo_corpus data loader, checkpoint every 2000 batches and exact resume (-r) as the LSTM.
  data_loader+: { num_workers:: 0 },  // hidden: the default, loading in the training process
  trainer+: {
    // The noam schedule sets the learning rate at every step (peak 5.7e-4 at step 6000).
    // allennlp's "adam" in one fused kernel; the softmax's sparse rows (sparse_embeddings: true,
    // from elmo_lstm_original.jsonnet) get lazy Adam: a step updates the moments and weights of
    // the rows it touched only (docs/pretraining.md: Sparse softmax).
    optimizer: { type: 'fused_adam', lr: 0.0005, betas: [0.9, 0.98], eps: 1e-9 },
    learning_rate_scheduler: { type: 'noam', model_size: 512, warmup_steps: 6000 },
  },
}
