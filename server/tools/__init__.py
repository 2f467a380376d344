"""b10621's built-in tools (--tools; server-tools.cpp): their definitions and calls, on the host."""
