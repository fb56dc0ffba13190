// UPOS tagging from CoNLL-U without ELMo: the same crf_tagger as pos_tagger_elmo.jsonnet, fed
// by the word embedding alone. Override data paths with -o, e.g.
//   -o '{"train_data_path": "train.conllu", "validation_data_path": "dev.conllu"}'
local word_dim = 32;
{
  // Process-wide settings, as in pos_tagger_elmo.jsonnet (README: Process settings).
  process_settings:: { keep_freed_heap: true, tf32: null },
  evaluation: { type: "elmo_evaluator" } + $.process_settings,
  dataset_reader: {
    type: "conllu_tagging",
    token_indexers: { tokens: { type: "single_id", lowercase_tokens: true } },
  },
  // A label that only the evaluation data holds is scored as an error, with a counted
  // warning (allennlp's default vocabulary stops with a KeyError); the evaluator logs the total.
  vocabulary: { type: "unseen_labels_as_errors" },
  train_data_path: "fixtures/tagged/train.conllu",
  validation_data_path: "fixtures/tagged/valid.conllu",
  model: {
    type: "crf_tagger",
    text_field_embedder: { token_embedders: { tokens: { type: "embedding", embedding_dim: word_dim } } },
    encoder: { type: "lstm", input_size: word_dim, hidden_size: 64, num_layers: 1, bidirectional: true },
    dropout: 0.3,
    include_start_end_transitions: false,
    // Same regularizer as the ELMo tagger; this model has no scalar mix, so it matches nothing.
    regularizer: { regexes: [["scalar_mix\\.scalar_parameters", { type: "l2", alpha: 0.001 }]] },
  },
  data_loader: { batch_sampler: { type: "bucket", batch_size: 32, sorting_keys: ["tokens"] } },
  trainer: {
    num_epochs: 15,
    patience: 5,
    optimizer: { type: "adam", lr: 0.003 },
    grad_norm: 5.0,
    validation_metric: "+accuracy",
    // allennlp's checkpointer, except that each file is written whole (renamed when complete).
    checkpointer: { type: "elmo_checkpointer" },
    // TensorBoard event files in <serialization dir>/log/{train,validation}: every metric, the loss
    // and the learning rate, each summary_interval batches and per epoch (docs/pretraining.md: Watching training).
    callbacks: [
      { type: "elmo_process_settings" } + $.process_settings,  // first: -o trainer.callbacks.0.*
      { type: "elmo_tensorboard", summary_interval: 10, should_log_learning_rate: true },
    ],
    cuda_device: -1,
  },
}
