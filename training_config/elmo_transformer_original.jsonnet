// The published transformer ELMo (Peters et al., 2018b, "Dissecting Contextual Word
// Embeddings") for GPU runs: 6 layers per direction of 512 dims, 8 heads, feed-forward 2048,
// 2048-filter character CNN with 2 highway layers, sampled softmax with 8192 negatives,
// dropout 0.1, Adam with the inverse-square-root ("noam") warm-up schedule, windows of 20
// tokens. Same reader, indexers and character CNN as elmo_lstm_original.jsonnet.
// Data: your own shards, e.g.
//   -o '{"train_data_path": "corpus/train/*.txt", "validation_data_path": "corpus/valid.txt"}'
// For a big corpus count the vocabulary once with `allennlp elmo-vocab` and add
//   -o '{"vocabulary": {"type": "elmo_tokens_file", "tokens_file": "tokens.txt"}}'
// For several GPUs add -o '{"distributed": {"cuda_devices": [0, 1, 2]}}'.
{
  dataset_reader: { type: "elmo_corpus", max_sequence_length: 20, skip_headings: true },
  train_data_path: "fixtures/demo_corpus/train/*.txt",
  validation_data_path: "fixtures/demo_corpus/valid/*.txt",
  vocabulary: { type: "from_instances", min_count: { tokens: 3 } },
  model: {
    type: "elmo_bilm",
    text_field_embedder: {
      token_embedders: {
        elmo: {
          type: "elmo_char_cnn",
          embedding_dim: 16,
          filters: [[1, 32], [2, 32], [3, 64], [4, 128], [5, 256], [6, 512], [7, 1024]],
          num_highway: 2,
          projection_dim: 512,
        },
        tokens: { type: "empty" },
      },
    },
    contextualizer: {
      type: "elmo_transformer",
      input_dim: 512,
      hidden_dim: 2048,
      num_layers: 6,
      num_attention_heads: 8,
      dropout: 0.1,
      input_dropout: 0.1,
      backward_positions: "from_start",  // as allennlp-models; "from_end": strict right-to-left
    },
    dropout: 0.1,
    num_samples: 8192,
    sparse_embeddings: false,
  },
  data_loader: {
    batch_size: 128,
    shuffle: true,
    max_instances_in_memory: 128 * 100,
  },
  trainer: {
    num_epochs: 10,
    // The noam schedule sets the learning rate at every step (peak 5.7e-4 at step 6000).
    optimizer: { type: "fused_adam", lr: 0.0005, betas: [0.9, 0.98], eps: 1e-9 },  // allennlp's "adam", one fused kernel
    learning_rate_scheduler: { type: "noam", model_size: 512, warmup_steps: 6000 },
    grad_norm: 10.0,
    validation_metric: "-perplexity",
    // TensorBoard event files in <serialization dir>/log/{train,validation}: every metric, the loss
    // and the learning rate, each summary_interval batches and per epoch (README: Watching training).
    callbacks: [
      { type: "tensorboard", summary_interval: 100, should_log_learning_rate: true },
      { type: "tokens_per_second", summary_interval: 100 },  // train/tokens_per_second
    ],
    cuda_device: 0,
    use_amp: false,
  },
}
