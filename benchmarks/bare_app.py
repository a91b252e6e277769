"""The baseline app, which the load-test package owns (``aviso_loadtests.bare_app``).

Run as ``python -m benchmarks.bare_app PORT``.
"""

from aviso_loadtests.bare_app import app, echo, main

__all__ = ["app", "echo"]

if __name__ == "__main__":
    main()
