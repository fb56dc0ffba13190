// Sentence classification with ELMo: allennlp's basic_classifier over text_classification_json
// lines ({"text": ..., "label": ...}), fed by our `elmo_bilm_embedder` (a learned mix of every
// biLM layer) + a small word embedding, pooled by a BiLSTM.
// Defaults: the bundled fixtures/classification data (sentence forms: declarative, negated,
// imperative, conditional; scripts/make_classification_fixture.py) and the demo biLM
// (`make demo` trains it). Override with -o, e.g.
//   -o '{"train_data_path": "train.jsonl", "validation_data_path": "dev.jsonl",
//        "model.text_field_embedder.token_embedders.elmo.pretrained_file": "bilm/model.tar.gz"}'
// The reader splits text on whitespace (its default, spaCy, downloads a model).
// The encoder's input_size is the ELMo width (2 x the biLM's projection: 256 for the demo
// biLM, 1024 for the published original) + the word embedding: override
// "model.seq2vec_encoder.input_size" for another biLM.
local elmo_dim = 256;
local word_dim = 32;
{
  // Process-wide settings, applied once when a command starts running the model: the first
  // trainer callback (train) and the evaluator (evaluate) take them.
  process_settings:: { keep_freed_heap: true, tf32: null },
  evaluation: { type: "elmo_evaluator" } + $.process_settings,
  dataset_reader: {
    type: "text_classification_json",
    tokenizer: { type: "whitespace" },
    token_indexers: {
      tokens: { type: "single_id", lowercase_tokens: true },
      elmo: { type: "elmo_char_ids" },
    },
  },
  // A label that only the evaluation data holds is scored as an error, with a counted warning
  // (elmo_evaluator logs the total).
  vocabulary: { type: "unseen_labels_as_errors" },
  train_data_path: "fixtures/classification/train.jsonl",
  validation_data_path: "fixtures/classification/valid.jsonl",
  model: {
    type: "basic_classifier",
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
    seq2vec_encoder: { type: "lstm", input_size: elmo_dim + word_dim, hidden_size: 64, bidirectional: true },
    dropout: 0.3,
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
    callbacks: [
      { type: "elmo_process_settings" } + $.process_settings,  // first: -o trainer.callbacks.0.*
      { type: "elmo_tensorboard", summary_interval: 10 },
      { type: "elmo_mix_weights", summary_interval: 10 },  // elmo_mix/*: softmax(s)_j and gamma
    ],
    cuda_device: -1,
  },
}
