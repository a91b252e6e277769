"""The host's own building blocks of the API description (the shared ones are public, in
:mod:`aviso_plugins.openapi`): request ids, credentials, example errors."""

from __future__ import annotations

from typing import Any

from aviso_plugins.openapi import Doc, json_response, schema_ref

UUID_PATTERN = "^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$"

# Invented request ids, reused so the examples of one exchange agree with each other.
RID_NOTIFY = "2b8e4f4c-7a0d-4d7e-9a3b-5f1e0c6d9a12"
RID_WATCH = "d41f0a9e-3c55-4b8e-8f0e-6a2b7c9d1e30"
RID_REPLAY = "7c2d9b10-5e4f-4a6b-b1c8-0f9e8d7c6b5a"
RID_ADMIN = "6f1c2e8a-0b7d-4a55-9e39-2d0c8f3b6a41"
RID_SCHEMA = "0a7b3c4d-1e2f-4a5b-8c9d-0e1f2a3b4c5d"

ADMIN_CREDENTIALS: list[Doc] = [{"bearer_jwt": []}, {"basic": []}]


def admin_result(description: str, **examples: Any) -> Doc:
    return json_response(description, schema_ref("AdminResult"), **examples)
