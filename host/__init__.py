"""The aviso server: the host that loads the plugins and serves the HTTP API."""

BUILTIN_DISTRIBUTION = "aviso-py"
"""The distribution that installs the host and the built-in plugins."""
