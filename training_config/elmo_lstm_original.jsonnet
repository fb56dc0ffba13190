// The published original ELMo (Peters et al., 2018) for GPU runs: 2 x 4096/512 LSTM with
// clips 3, 2048-filter character CNN with 2 highway layers, sampled softmax with 8192
// negatives, dropout 0.1, Adagrad 0.2, gradient norm 10, windows of 20 tokens.
// Every training batch has one shape, 128 x 22 tokens (data_loader.fixed_shape), padded.
// Reference figures (tokens/s, memory): not measured yet on a GPU.
// The original used batch 128 per GPU on 3 GPUs. Your data on 3 GPUs, every override in one
// JSON (allennlp keeps only the last -o; docs/scaling.md):
//   -o '{"train_data_path": "corpus/train/*.txt", "validation_data_path": "corpus/valid.txt",
//        "distributed": {"cuda_devices": [0, 1, 2]}}'
// The vocabulary is counted from the training data (sorted by frequency, as the sampled softmax
// expects); for a big corpus count it once with `allennlp elmo-vocab` and add to that JSON
//   "vocabulary": {"type": "elmo_tokens_file", "tokens_file": "tokens.txt"}
{
  // Process-wide settings, applied once when a command starts running the model: the first
  // trainer callback (train) and the evaluator (evaluate) take them. README: Process settings.
  // For TF32 on the GPU: -o '{"trainer.callbacks.0.tf32": true, "evaluation.tf32": true}'.
  process_settings:: { keep_freed_heap: true, tf32: null },
  evaluation: { type: "elmo_evaluator" } + $.process_settings,
  dataset_reader: {
    type: "elmo_corpus",
    max_sequence_length: 20,
    skip_headings: true,
    // Written out for allennlp-models' language-model token embedders (see elmo_lstm.jsonnet).
    token_indexers: { tokens: { type: "single_id" }, elmo: { type: "elmo_char_ids" } },
  },
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
      type: "elmo_lstm",
      input_dim: 512,
      cell_size: 4096,
      num_layers: 2,
      cell_clip: 3,
      proj_clip: 3,
      dropout: 0.1,
    },
    dropout: 0.1,
    num_samples: 8192,
    // The sampled softmax's rows (vocabulary x 512) as sparse embeddings, as bilm-tf: a step
    // computes, synchronizes (under DDP by gathering every process's rows) and applies gradients
    // for the ~8k rows it touched, not all of them. Adagrad's sparse update equals its dense one
    // (an untouched row changes neither its accumulator nor its weight). row_gradients: those
    // rows' gradient is one dense tensor of fixed shape (no sparse tensors, nothing that depends
    // on the data: the GPU step); the optimizer (elmo_adagrad, fused_adam) applies it.
    sparse_embeddings: true,
    row_gradients: true,
  },
  // The corpus is cut into ~1 MiB chunks (about 100 batches of 1B Word), shuffled in chunk order
  // and within each chunk by (seed, epoch): batch k of an epoch is the same in every run, so
  // `allennlp train -r` continues exactly where the checkpoint was, reading nothing before it.
  data_loader: {
    type: "elmo_corpus",
    batch_size: 128,
    shuffle: true,
    chunk_bytes: 1024 * 1024,
    num_workers: 1,
    fixed_shape: true,  // padded to 128 x 22 (20 tokens + <S> </S>): no new shape on a GPU
  },
  // On a GPU, -o '{"trainer.type": "elmo_graph_step"}' captures each training step in one CUDA
  // graph and replays it (docs/gpu.md, "One CUDA graph per step").
  trainer: {
    num_epochs: 10,
    // allennlp's adagrad, applying the softmax's row gradients too (docs/pretraining.md)
    optimizer: { type: "elmo_adagrad", lr: 0.2, initial_accumulator_value: 1.0 },
    grad_norm: 10.0,
    validation_metric: "-perplexity",
    // TensorBoard event files in <serialization dir>/log/{train,validation}: every metric, the loss
    // and the learning rate, each summary_interval batches and per epoch (docs/pretraining.md: Watching training);
    // elmo_tensorboard is allennlp's tensorboard written by rank 0 only (once, not on every node).
    // A checkpoint every 2000 batches (minutes on a GPU; an epoch of 1B Word is hours):
    // `allennlp train -r` goes on from the last one. (allennlp refuses save_every_num_seconds
    // under distributed training.)
    // elmo_checkpointer: allennlp's, except that each file is written whole (a kill or a full
    // disk while saving leaves no file cut short), and that on several nodes (one folder each)
    // -r resumes from the newest checkpoint complete on every node.
    checkpointer: { type: "elmo_checkpointer", save_every_num_batches: 2000 },
    callbacks: [
      { type: "elmo_process_settings" } + $.process_settings,  // first: -o trainer.callbacks.0.*
      { type: "elmo_tensorboard", summary_interval: 100, should_log_learning_rate: true },
      { type: "tokens_per_second", summary_interval: 100 },  // train/tokens_per_second
      // Saves the data loader's position in each checkpoint and starts there on -r.
      { type: "elmo_corpus_resume" },
      // Several nodes: a node whose peer is lost (killed, link cut) stops after timeout_seconds
      // with one line naming it, instead of waiting 30 minutes (docs/scaling.md, "Several nodes").
      { type: "elmo_peer_watchdog", timeout_seconds: 60 },
    ],
    // Validation inside the epoch (docs/pretraining.md, "Long runs"): add
    //   { type: "elmo_validation_checks", every_num_batches: 2000, max_batches: 20 }
    // to the callbacks (a validation batch over all 793k words costs 2-3 training steps).
    cuda_device: 0,
    use_amp: false,
  },
}
