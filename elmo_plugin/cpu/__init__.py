"""The CPU fast path of the clipped LSTM: `packed_clipped_lstm` runs a layer's directions over
packed sequences, forward and backward time loops in C++ (`csrc/`), every matmul through oneDNN.
`modules.elmo_lstm` calls it for float32 CPU tensors; everything else runs its reference loop.
Imports nothing from `modules` (one exception, `glibc_heap`, see tests/test_layers.py)."""
