// Demo-size transformer ELMo biLM: the reader, indexers and character CNN of elmo_lstm.jsonnet,
// with the `elmo_transformer` contextualizer (2 layers of 128 dims, 4 heads, feed-forward 512)
// in place of the LSTM: a few minutes on 2 CPU cores on the bundled corpus.
// Point it at your own text with -o, e.g.
//   -o '{"train_data_path": "my/shards/*.txt", "validation_data_path": "my/valid.txt"}'
{
  dataset_reader: {
    type: "elmo_corpus",
    max_sequence_length: 40,  // longer lines become consecutive windows
    skip_headings: true,  // drop "= Heading =" lines (WikiText)
  },
  train_data_path: "fixtures/demo_corpus/train/*.txt",
  validation_data_path: "fixtures/demo_corpus/valid/*.txt",
  vocabulary: { type: "from_instances", min_count: { tokens: 2 } },
  model: {
    type: "elmo_bilm",
    text_field_embedder: {
      token_embedders: {
        elmo: {
          type: "elmo_char_cnn",
          embedding_dim: 16,
          filters: [[1, 32], [2, 32], [3, 64], [4, 128], [5, 256]],
          num_highway: 1,
          projection_dim: 128,
        },
        tokens: { type: "empty" },  // word ids are only the softmax targets
      },
    },
    contextualizer: {
      type: "elmo_transformer",
      input_dim: 128,
      hidden_dim: 512,
      num_layers: 2,
      num_attention_heads: 4,
      dropout: 0.1,
      input_dropout: 0.1,
      backward_positions: "from_start",  // as allennlp-models; "from_end": strict right-to-left
    },
    dropout: 0.1,
  },
  data_loader: {
    batch_sampler: { type: "bucket", batch_size: 32, sorting_keys: ["source"] },
    max_instances_in_memory: 2048,  // stream the corpus in chunks
  },
  trainer: {
    num_epochs: 4,
    optimizer: { type: "fused_adam", lr: 0.001 },  // allennlp's "adam", one fused kernel
    grad_norm: 1.0,
    validation_metric: "-perplexity",
    // TensorBoard event files in <serialization dir>/log/{train,validation}: every metric, the loss
    // and the learning rate, each summary_interval batches and per epoch (README: Watching training).
    callbacks: [
      { type: "tensorboard", summary_interval: 20, should_log_learning_rate: true },
      { type: "tokens_per_second", summary_interval: 20 },  // train/tokens_per_second
    ],
    cuda_device: -1,
  },
}
