"""The engine: one thread owns every MLX object; the HTTP layer talks to it in plain data."""
