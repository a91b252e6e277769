"""The lower baseline: a raw ASGI app (no framework) that reads the whole JSON POST body,
parses it and answers JSON, served exactly like aviso.

Run as ``python -m aviso_loadtests.raw_app PORT``. Beside ``aviso_loadtests.bare_app`` (the
same endpoint on Starlette) it shows what the framework costs, and what is left for aviso.
"""

from __future__ import annotations

import json

from starlette.types import Receive, Scope, Send

from aviso_loadtests.bare_app import serve

_HEADERS = [(b"content-type", b"application/json")]


async def app(scope: Scope, receive: Receive, send: Send) -> None:
    if scope["type"] != "http":
        return  # lifespan is off when served by main()
    chunks: list[bytes] = []
    while True:
        message = await receive()
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            break
    body = json.loads(b"".join(chunks))
    answer = json.dumps({"status": "success", "event_type": body.get("event_type")}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": 200,
            "headers": [*_HEADERS, (b"content-length", str(len(answer)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": answer})


def main() -> None:
    serve(app)


if __name__ == "__main__":
    main()
