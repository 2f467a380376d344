"""The command line: b10621's spellings (growing), LLAMA_ARG_* bindings, and mlxcel's own subcommands."""
