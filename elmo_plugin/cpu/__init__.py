"""The CPU fast path of the clipped LSTM: `packed_clipped_lstm.packed_clipped_lstm` runs a layer's
directions over packed sequences, forward and backward time loops in C++ (`csrc/`), every matmul
through oneDNN. `modules.elmo_lstm` calls it where `packed_clipped_lstm.runs_fast` says it takes
the inputs (float32 CPU, no autocast, the C++ loops built); everything else runs the reference
loop of `modules.clipped_lstm`. Imports nothing from `modules`."""
