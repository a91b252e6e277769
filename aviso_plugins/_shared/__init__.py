"""Helpers that aviso-py's own packages share: the host, the built-in plugins, Spark, the load
tests and the testing kit (number, coordinate, duration and size grammars, constraint
compilation, JSON depth, Server-Sent Events parsing, subscriber fan-out, remembered message
ids).

Not plugin API: these names change without notice between releases, and a plugin must not
import them. What a plugin may rely on is listed in docs/plugins.md.
"""
