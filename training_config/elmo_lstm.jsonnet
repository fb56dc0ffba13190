// Demo-size LSTM ELMo biLM (2 x 512/128, 512 char filters): a few minutes on 2 CPU cores
// on the bundled corpus. Same architecture as the published ELMo, smaller numbers.
// Reference figures (`allennlp elmo-plan` on a 2-core AMD EPYC, 2 threads): 2,524 tokens/s,
// peak memory 0.92 GiB, 152 batches (about 30 s) per epoch of the bundled corpus.
// Point it at your own text with -o, e.g.
//   -o '{"train_data_path": "my/shards/*.txt", "validation_data_path": "my/valid.txt"}'
{
  // Process-wide settings, applied once when a command starts running the model (README:
  // Process settings): by the first trainer callback in `allennlp train`, by the evaluator in
  // `allennlp evaluate` (the archive keeps the `evaluation` key; `allennlp train` ignores it).
  // keep_freed_heap: glibc keeps freed CPU memory in the process (faster CPU LSTM steps);
  // tf32: true / false lets (or stops) GPU float32 matmuls use TF32, null: torch's defaults.
  // Override with -o '{"trainer.callbacks.0.tf32": true, "evaluation.tf32": true}'.
  process_settings:: { keep_freed_heap: true, tf32: null },
  evaluation: { type: "elmo_evaluator" } + $.process_settings,
  dataset_reader: {
    type: "elmo_corpus",
    max_sequence_length: 40,  // longer lines become consecutive windows
    skip_headings: true,  // drop "= Heading =" lines (WikiText)
    // The reader's defaults, written out: allennlp-models' language-model token embedders read
    // them from the archived config (`tokens`: softmax targets; `elmo`: character ids).
    token_indexers: { tokens: { type: "single_id" }, elmo: { type: "elmo_char_ids" } },
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
      type: "elmo_lstm",
      input_dim: 128,
      cell_size: 512,
      num_layers: 2,
      cell_clip: 3,
      proj_clip: 3,
      dropout: 0.1,
    },
    dropout: 0.1,
  },
  // The corpus in chunks of ~64 KiB, shuffled in chunk order and within each chunk by (seed,
  // epoch), batched by length within a chunk: batch k of an epoch is the same in every run, so
  // `allennlp train -r` continues exactly where its checkpoint was (elmo_corpus_resume below),
  // and the loader has a length: the progress bar shows the total and the time left.
  data_loader: {
    type: "elmo_corpus",
    batch_size: 32,
    shuffle: true,
    bucket_by_length: true,
    chunk_bytes: 64 * 1024,
  },
  // Validation in file order: the checks' sample (below) is the first lines of the file.
  validation_data_loader: { type: "elmo_corpus", batch_size: 32 },
  trainer: {
    num_epochs: 4,
    optimizer: { type: "adam", lr: 0.002 },
    grad_norm: 10.0,
    validation_metric: "-perplexity",
    // allennlp's checkpointer, except that each file is written whole (renamed when complete).
    checkpointer: { type: "elmo_checkpointer" },
    // TensorBoard event files in <serialization dir>/log/{train,validation}: every metric, the loss
    // and the learning rate, each summary_interval batches and per epoch (docs/pretraining.md: Watching training),
    // written by rank 0 only (elmo_tensorboard: allennlp's tensorboard, once per run).
    callbacks: [
      { type: "elmo_process_settings" } + $.process_settings,  // first: -o trainer.callbacks.0.*
      { type: "elmo_tensorboard", summary_interval: 20, should_log_learning_rate: true },
      { type: "tokens_per_second", summary_interval: 20 },  // train/tokens_per_second
      // Validation inside the epoch: every 50 batches on the first 5 validation batches, logged
      // to validation_checks.jsonl and log/checks; the best check -> model_best_check.tar.gz.
      { type: "elmo_validation_checks", every_num_batches: 50, max_batches: 5 },
      // Saves the data loader's position in each checkpoint and starts there on -r.
      { type: "elmo_corpus_resume" },
    ],
    cuda_device: -1,
  },
}
