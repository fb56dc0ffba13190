// Continue pretraining an LSTM ELMo from the standard files (options.json + weights.hdf5, and
// softmax.hdf5 + vocab.txt when present): a published ELMo, or the output of `allennlp elmo-export`.
// One command resolves everything from the files (docs/adapting.md):
//   allennlp elmo-continue my_elmo -s out --train-data-path 'new/text/*.txt' \
//     --validation-data-path new/valid.txt [--freeze char_cnn,lstm.0] [--vocabulary tokens.txt]
// my_elmo: a folder with one *options.json and one *weights.hdf5 under any names (published
// downloads are named like elmo_2x4096_512_2048cnn_2xhighway_options.json), or the options file
// with --weights-file; paths or URLs. It takes the architecture from the options file, the
// vocabulary from --vocabulary, else the folder's vocab.txt, else counts it from your text, and
// writes them into out/config.json, so the archive loads once the folder is gone.
//
// Without elmo-continue, this config states the demo architecture (elmo_lstm.jsonnet), which must
// equal the options file (a mismatch is an error listing the differing options), and counts the
// vocabulary from the text (tokens seen twice); the folder's softmax rows are mapped onto it by
// token. To keep the folder's own vocabulary, e.g. for an `elmo-export` of the demo model:
//   allennlp train training_config/elmo_lstm_continue.jsonnet -s out --include-package elmo_plugin -o '{
//     "model.pretrained_file": "my_elmo",
//     "vocabulary": {"type": "elmo_tokens_file", "tokens_file": "my_elmo/vocab.txt"},
//     "train_data_path": "new/text/*.txt", "validation_data_path": "new/valid.txt"}'
// The weights end up in the new archive; allennlp ignores pretrained_file when loading it.
local base = import 'elmo_lstm.jsonnet';

base {
  model+: { pretrained_file: '' },  // required: the ELMo folder, or [options, weights]
  trainer+: { optimizer: { type: 'adam', lr: 0.0005 } },
}
