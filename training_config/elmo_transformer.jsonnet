// Demo-size transformer ELMo biLM: elmo_lstm.jsonnet (reader, indexers, character CNN, data,
// trainer) with the `elmo_transformer` contextualizer (2 layers of 128 dims, 4 heads,
// feed-forward 512) in place of the LSTM: a few minutes on 2 CPU cores on the bundled corpus.
// Reference figures (`allennlp elmo-plan` on a 2-core AMD EPYC, 2 threads): 4,422 tokens/s,
// peak memory 0.90 GiB, 152 batches (about 25 s) per epoch of the bundled corpus.
local lstm = import 'elmo_lstm.jsonnet';

lstm {
  // The heap setting is for the LSTM's CPU steps: left off here (README: Process settings).
  process_settings:: { keep_freed_heap: false, tf32: null },
  model+: {
    contextualizer: {
      type: 'elmo_transformer',
      input_dim: 128,
      feedforward_hidden_dim: 512,
      num_layers: 2,
      num_attention_heads: 4,
      dropout: 0.1,
      input_dropout: 0.1,
      backward_positions: 'from_start',  // as allennlp-models; "from_end": strict right-to-left
    },
  },
  trainer+: {
    optimizer: { type: 'fused_adam', lr: 0.001 },  // allennlp's "adam", one fused kernel
    grad_norm: 1.0,
  },
}
