"""The differential oracle: the real b10621 llama-server and mlxcel, same weights, same requests."""
