// The published original ELMo (elmo_lstm_original.jsonnet) in its own training regime, as
// bilm-tf trained it: <S> ... </S> per sentence, 128 continuous streams per GPU (one per batch
// row) read in windows of 20 tokens without padding, the backward LM on the reversed streams,
// each row's LSTM state (every layer) carried across batches, detached. Under
// `distributed` each process reads its own 128 streams; every process has as many batches.
// Validation / `allennlp evaluate`: the held-out text streamed in order, state carried.
// `allennlp train -r` resumes at the checkpoint's batch (elmo_corpus_resume) with zero state.
// Every training batch has one shape, 128 x 21 tokens (data_loader.fixed_shape): the epoch's
// last, shorter windows are padded.
local base = import 'elmo_lstm_original.jsonnet';

base {
  dataset_reader+: { max_sequence_length: null },
  model+: { stateful: true },
  data_loader: { type: 'elmo_streams', batch_size: 128, window_size: 20, shuffle: true, chunk_bytes: 1024 * 1024, fixed_shape: true },
  validation_data_loader: { type: 'elmo_streams', batch_size: 128, window_size: 20 },
}
