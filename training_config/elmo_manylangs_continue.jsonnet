// Continue pretraining an ELMoForManyLangs (HIT-SCIR) model on your own text: its weights are
// the starting point; the softmax starts fresh (its releases have none), over the words of your
// text (`tokens`, min_count 2). Its character and word dictionaries stay as released (the
// `elmo_manylangs` vocabulary records them; the archive keeps them).
// The architecture below is the one of its released models (the package's bundled
// cnn_50_100_512_4096_sample.json); it must equal the folder's, or the error lists what differs.
// Point it at the folder (both keys) and your text with -o, e.g.
//   allennlp train training_config/elmo_manylangs_continue.jsonnet -s out --include-package elmo_plugin -o '{
//     "vocabulary.model_folder": "zhs.model", "model.pretrained_file": "zhs.model",
//     "train_data_path": "my/text/*.txt", "validation_data_path": "my/valid.txt"}'
// The result is one of our biLM archives: `elmo_bilm_embedder` (with the `elmo_manylangs_ids`
// indexer) and `allennlp elmo-embed` take its model.tar.gz.
local model_folder = 'elmo_manylangs_model';
local max_characters_per_token = 50;  // the release's token_embedder.max_characters_per_token
{
  // Process-wide settings, applied once when a command starts running the model: the first
  // trainer callback (train) and the evaluator (evaluate) take them. README: Process settings.
  process_settings:: { keep_freed_heap: true, tf32: null },
  evaluation: { type: 'elmo_evaluator' } + $.process_settings,
  dataset_reader: {
    type: 'elmo_corpus',
    max_sequence_length: 40,
    token_indexers: {
      tokens: { type: 'single_id' },  // softmax targets
      // its word + character ids; the reader's <S> / </S> become its <bos> / <eos>
      elmo: {
        type: 'elmo_manylangs_ids',
        max_characters_per_token: max_characters_per_token,
        sentence_boundary_tokens: ['<S>', '</S>'],
      },
    },
  },
  train_data_path: 'fixtures/demo_corpus/train/*.txt',
  validation_data_path: 'fixtures/demo_corpus/valid/*.txt',
  vocabulary: { type: 'elmo_manylangs', model_folder: model_folder, min_count: { tokens: 2 } },
  model: {
    type: 'elmo_bilm',
    pretrained_file: model_folder,
    text_field_embedder: {
      token_embedders: {
        elmo: {
          type: 'elmo_manylangs_cnn',  // sizes of its dictionaries come from the vocabulary
          char_dim: 50,
          filters: [[1, 32], [2, 32], [3, 64], [4, 128], [5, 256], [6, 512], [7, 1024]],
          num_highway: 2,
          projection_dim: 512,
          word_dim: 100,
          activation: 'relu',
          max_characters_per_token: max_characters_per_token,
        },
        tokens: { type: 'empty' },
      },
    },
    contextualizer: {
      type: 'elmo_lstm',
      input_dim: 512,
      cell_size: 4096,
      num_layers: 2,
      cell_clip: 3,
      proj_clip: 3,
      dropout: 0.1,
    },
    dropout: 0.1,
  },
  data_loader: { batch_sampler: { type: 'bucket', batch_size: 32, sorting_keys: ['source'] } },
  trainer: {
    num_epochs: 2,
    optimizer: { type: 'adam', lr: 0.0005 },
    grad_norm: 10.0,
    validation_metric: '-perplexity',
    // allennlp's checkpointer, except that each file is written whole (renamed when complete).
    checkpointer: { type: 'elmo_checkpointer' },
    callbacks: [{ type: 'elmo_process_settings' } + $.process_settings],
    cuda_device: -1,
  },
}
