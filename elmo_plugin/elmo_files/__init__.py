"""The standard ELMo files (options.json, weights.hdf5, softmax.hdf5, vocab.txt) <-> our modules."""
