"""The bulk-POST client lives in the load-test package; the tests use the same one."""

from aviso_loadtests.pipelined import post_many, request_bytes

__all__ = ["post_many", "request_bytes"]
