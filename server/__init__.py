"""mlxcel: an MLX-backed llama-server (b10621) replacement."""

from .models.architectures import bare_package

bare_package()  # before any module here imports mlx_lm.models: its package __init__ would bring transformers
