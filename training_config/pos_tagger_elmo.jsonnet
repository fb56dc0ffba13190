// UPOS tagging from CoNLL-U with ELMo: allennlp-models' crf_tagger over a BiLSTM, fed by our
// `elmo_bilm_embedder` (a learned mix of every biLM layer) + a small word embedding.
// Defaults: the bundled fixtures/tagged data and the demo biLM (`make demo` trains it).
// Override with -o, e.g.
//   -o '{"train_data_path": "train.conllu", "validation_data_path": "dev.conllu",
//        "model.text_field_embedder.token_embedders.elmo.pretrained_file": "bilm/model.tar.gz"}'
// pretrained_file: our biLM model.tar.gz, or a folder with options.json + weights.hdf5, or an
// ELMoForManyLangs model folder (then the elmo indexer is
// { type: "elmo_manylangs_ids", max_characters_per_token: 50 }; docs/other-languages.md).
// The encoder's input_dim is the ELMo width (2 x the biLM's projection: 256 for the demo
// biLM, 1024 for the published original) + the word embedding: override
// "model.encoder.input_size" for another biLM.
local elmo_dim = 256;
local word_dim = 32;
{
  // Process-wide settings, applied once when a command starts running the model: the first
  // trainer callback (train) and the evaluator (evaluate) take them. README: Process settings.
  process_settings:: { keep_freed_heap: true, tf32: null },
  evaluation: { type: "elmo_evaluator" } + $.process_settings,
  dataset_reader: {
    type: "conllu_tagging",
    token_indexers: {
      tokens: { type: "single_id", lowercase_tokens: true },
      elmo: { type: "elmo_char_ids" },
    },
  },
  // A label that only the evaluation data holds is scored as an error, with a counted
  // warning (allennlp's default vocabulary stops with a KeyError); elmo_evaluator logs the total.
  vocabulary: { type: "unseen_labels_as_errors" },
  train_data_path: "fixtures/tagged/train.conllu",
  validation_data_path: "fixtures/tagged/valid.conllu",
  model: {
    type: "crf_tagger",
    text_field_embedder: {
      token_embedders: {
        tokens: { type: "embedding", embedding_dim: word_dim },
        elmo: {
          type: "elmo_bilm_embedder",
          pretrained_file: "demo_output/bilm/model.tar.gz",
          requires_grad: false,  // the biLM stays fixed; the layer mix (s, gamma) is learned
          do_layer_norm: false,
          dropout: 0.5,
        },
      },
    },
    encoder: { type: "lstm", input_size: elmo_dim + word_dim, hidden_size: 64, num_layers: 1, bidirectional: true },
    dropout: 0.3,
    include_start_end_transitions: false,
    // ELMo's regularizer: an L2 penalty on the layer-mix weights s (pulls softmax(s) towards the average).
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
      { type: "elmo_mix_weights", summary_interval: 10 },  // elmo_mix/*: softmax(s)_j and gamma
    ],
    cuda_device: -1,
  },
}
