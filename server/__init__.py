"""mlxcel: an MLX-backed llama-server (b10621) replacement."""
