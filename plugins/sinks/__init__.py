"""Built-in sinks: ``http`` (a running server's notify API) and ``backend`` (a store, directly)."""
