"""`python -m server ARGS` is `mlxcel-server ARGS`."""

from .cli.main import server_main

server_main()
