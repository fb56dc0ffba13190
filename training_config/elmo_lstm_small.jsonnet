// The published "small" ELMo (2 x 1024/128 LSTM, 1 highway layer, the original's 2048-filter
// character CNN) with the original's training regime (elmo_lstm_original.jsonnet: sampled
// softmax with 8192 negatives as sparse embeddings, Adagrad 0.2, windows of 20 tokens, mid-epoch
// checkpoints, exact resume). For one GPU; between the CPU demo size and the original.
// Every training batch has one shape, 128 x 22 tokens (data_loader.fixed_shape), padded.
// Reference figures (tokens/s, memory): not measured yet on a GPU.
// Your data, one GPU (allennlp keeps only the last -o: give every override in one JSON):
//   allennlp train training_config/elmo_lstm_small.jsonnet -s out --include-package elmo_plugin \
//     -o '{"train_data_path": "corpus/train/*.txt", "validation_data_path": "corpus/valid.txt"}'
// Several GPUs: add "distributed": {"cuda_devices": [0, 1]} to that same JSON.
local original = import 'elmo_lstm_original.jsonnet';

original {
  model+: {
    text_field_embedder+: {
      token_embedders+: { elmo+: { num_highway: 1, projection_dim: 128 } },
    },
    contextualizer+: { input_dim: 128, cell_size: 1024 },
  },
}
