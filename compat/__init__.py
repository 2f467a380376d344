"""The compatibility manifest (compat/llama-server/b10621/) and its tooling: extract, validate, claims."""
