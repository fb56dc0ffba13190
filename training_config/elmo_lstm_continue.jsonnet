// Continue pretraining an LSTM biLM from the standard ELMo files (options.json + weights.hdf5,
// and softmax.hdf5 + vocab.txt when present), e.g. the output of `allennlp elmo-export`.
// The architecture below (elmo_lstm.jsonnet's demo size) must equal the folder's options.json:
// a mismatch is an error listing the differing options. The vocabulary is the folder's vocab.txt,
// so each softmax row lands on its token. Point it at your folder and text with -o, e.g.
//   allennlp train training_config/elmo_lstm_continue.jsonnet -s out --include-package elmo_plugin -o '{
//     "model.pretrained_file": "my_elmo", "vocabulary.tokens_file": "my_elmo/vocab.txt",
//     "train_data_path": "new/text/*.txt", "validation_data_path": "new/valid.txt"}'
// The weights end up in the new archive; allennlp ignores pretrained_file when loading it.
local base = import 'elmo_lstm.jsonnet';
local elmo_files = 'demo_output/elmo';  // where `make demo` exports its biLM

base {
  vocabulary: { type: 'elmo_tokens_file', tokens_file: elmo_files + '/vocab.txt' },
  model+: { pretrained_file: elmo_files },
  trainer+: { optimizer: { type: 'adam', lr: 0.0005 } },
}
