"""The baseline: a bare Starlette JSON POST endpoint, served exactly like aviso.

Run as ``python -m aviso_loadtests.bare_app PORT`` (``benchmarks.bare_app`` is the same app).
"""

from __future__ import annotations

import json
import sys

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import ASGIApp

from aviso_host.embedding import uvicorn_config


async def echo(request: Request) -> Response:
    body = json.loads(await request.body())
    return Response(
        json.dumps({"status": "success", "event_type": body.get("event_type")}),
        media_type="application/json",
    )


app = Starlette(routes=[Route("/api/v1/notification", echo, methods=["POST"])])


def serve(baseline: ASGIApp) -> None:
    """Serve a baseline app on ``sys.argv[1]`` with aviso's uvicorn settings, no lifespan."""
    config = uvicorn_config(baseline, "127.0.0.1", int(sys.argv[1]))
    config.lifespan = "off"
    uvicorn.Server(config).run()


def main() -> None:
    serve(app)


if __name__ == "__main__":
    main()
