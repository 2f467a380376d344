"""Media a request references: file:// paths under --media-path, remote URLs under the SSRF policy, and an
uploaded audio clip's container checks. A model with no vision or audio tower (every model mlxcel serves
today) refuses media before any of these runs (server/chat/params.py, server/api/audio.py)."""
