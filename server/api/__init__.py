"""The HTTP layer: FastAPI routes, one module per surface, talking to the engine in plain data."""
