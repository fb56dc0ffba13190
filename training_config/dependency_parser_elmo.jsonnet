// Dependency parsing from CoNLL-U with ELMo: allennlp-models' biaffine_parser and
// universal_dependencies reader, fed by our `elmo_bilm_embedder` + a small word embedding and
// (as allennlp-models' own config) a UPOS tag embedding.
// Defaults: the bundled fixtures/tagged data (heads by construction) and the demo biLM.
// Override with -o, e.g.
//   -o '{"train_data_path": "train.conllu", "validation_data_path": "dev.conllu",
//        "model.text_field_embedder.token_embedders.elmo.pretrained_file": "bilm/model.tar.gz"}'
// For another biLM, "model.encoder.input_size" = its ELMo width (2 x projection) + 32 + 16.
local elmo_dim = 256;
local word_dim = 32;
local pos_dim = 16;
{
  // Process-wide settings, applied once when a command starts running the model: the first
  // trainer callback (train) and the evaluator (evaluate) take them. README: Process settings.
  process_settings:: { keep_freed_heap: true, tf32: null },
  evaluation: { type: "elmo_evaluator" } + $.process_settings,
  dataset_reader: {
    type: "universal_dependencies",
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
    type: "biaffine_parser",
    text_field_embedder: {
      token_embedders: {
        tokens: { type: "embedding", embedding_dim: word_dim },
        elmo: {
          type: "elmo_bilm_embedder",
          pretrained_file: "demo_output/bilm/model.tar.gz",
          requires_grad: false,
          dropout: 0.3,
        },
      },
    },
    pos_tag_embedding: { embedding_dim: pos_dim, vocab_namespace: "pos" },
    encoder: {
      type: "stacked_bidirectional_lstm",
      input_size: elmo_dim + word_dim + pos_dim,
      hidden_size: 100,
      num_layers: 2,
      recurrent_dropout_probability: 0.3,
      use_highway: true,
    },
    arc_representation_dim: 100,
    tag_representation_dim: 50,
    dropout: 0.3,
    input_dropout: 0.3,
    // allennlp-models' parser initializer, kept off the text field embedder: the model applies it
    // after the embedders are built, so these regexes would otherwise overwrite the pretrained
    // biLM's weights (its LSTMs' weight_ih / weight_hh, its character CNN's projection).
    initializer: {
      prevent_regexes: ["^text_field_embedder\\."],
      regexes: [
        [".*projection.*weight", { type: "xavier_uniform" }],
        [".*projection.*bias", { type: "zero" }],
        [".*tag_bilinear.*weight", { type: "xavier_uniform" }],
        [".*tag_bilinear.*bias", { type: "zero" }],
        [".*weight_ih.*", { type: "xavier_uniform" }],
        [".*weight_hh.*", { type: "orthogonal" }],
        [".*bias_ih.*", { type: "zero" }],
        [".*bias_hh.*", { type: "lstm_hidden_bias" }],
      ],
    },
    regularizer: { regexes: [["scalar_mix\\.scalar_parameters", { type: "l2", alpha: 0.001 }]] },
  },
  data_loader: { batch_sampler: { type: "bucket", batch_size: 32, sorting_keys: ["words"] } },
  trainer: {
    num_epochs: 20,
    patience: 5,
    optimizer: { type: "adam", lr: 0.002, betas: [0.9, 0.9] },
    grad_norm: 5.0,
    validation_metric: "+LAS",
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
