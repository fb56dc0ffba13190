"""Loading a biLM from our model archives or from a folder of ELMo files."""
