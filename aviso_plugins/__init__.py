"""The aviso plugin API: what a plugin author imports.

A plugin is a module (or object) with functions decorated by :data:`hookimpl` whose names
match the hooks in :mod:`aviso_plugins.hookspecs`, advertised through the ``aviso``
setuptools entry-point group. The built-in plugins use exactly the same mechanism.
"""

import pluggy

PROJECT_NAME = "aviso"
ENTRY_POINT_GROUP = "aviso"

hookspec = pluggy.HookspecMarker(PROJECT_NAME)
hookimpl = pluggy.HookimplMarker(PROJECT_NAME)


class PluginError(RuntimeError):
    """A plugin could not be loaded or contradicts another one; fails startup. A plugin
    raises it from a hook called while the app is built to fail startup with its message."""


__all__ = ["ENTRY_POINT_GROUP", "PROJECT_NAME", "PluginError", "hookimpl", "hookspec"]
