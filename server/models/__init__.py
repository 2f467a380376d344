"""Model sources: GGUF import, the model store, loading, tokenizers."""
