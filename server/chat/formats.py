"""b10621's chat format and reasoning format names (common_chat_format_name, common_reasoning_format_name)."""

# indexed by common_chat_format: the native chat_format field carries the index
CHAT_FORMATS = ("Content-only", "peg-simple", "peg-native", "peg-gemma4", "peg-minimax-m3")
REASONING_FORMATS = ("none", "auto", "deepseek", "deepseek-legacy")
