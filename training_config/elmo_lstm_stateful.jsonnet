// elmo_lstm.jsonnet (demo size) in bilm-tf's training regime: every line wrapped in <S> ... </S>,
// the text read as 32 continuous streams (one per batch row) in windows of 20 tokens without
// padding, the backward LM reading the same streams reversed, and each row's LSTM state carried
// from one batch to the next (detached; reset where a stream starts). Validation and
// `allennlp evaluate` stream the held-out text in order, state carried (bilm-tf's run_test.py).
// Chunks of the training text (~64 KiB) are shuffled per epoch; lines keep their order in a chunk.
// `allennlp train -r` resumes at the checkpoint's batch with the LSTM state starting from zero.
local base = import 'elmo_lstm.jsonnet';

base {
  // Whole lines: a stream is continuous text, no line is cut into separately wrapped windows.
  dataset_reader+: { max_sequence_length: null },
  model+: { stateful: true },
  data_loader: { type: 'elmo_streams', batch_size: 32, window_size: 20, shuffle: true, chunk_bytes: 64 * 1024 },
  validation_data_loader: { type: 'elmo_streams', batch_size: 32, window_size: 20 },
  // Exact mid-epoch resume: elmo_lstm.jsonnet's elmo_corpus_resume callback (docs/pretraining.md).
  trainer+: { checkpointer+: { save_every_num_batches: 200 } },
}
