"""Running the app under uvicorn with aviso's shutdown semantics.

uvicorn's lifespan shutdown runs only after connections close, and SSE connections never
close on their own, so the exit signal itself must tell the service to end its streams.
"""

from __future__ import annotations

import asyncio
from types import FrameType

import uvicorn

from aviso_host.service import Service


class AvisoServer(uvicorn.Server):
    def __init__(self, config: uvicorn.Config, service: Service) -> None:
        super().__init__(config)
        self._service = service
        self._shutdown_task: asyncio.Task[None] | None = None

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if self._shutdown_task is None:
            loop = asyncio.get_event_loop()
            loop.call_soon_threadsafe(self._begin_shutdown, loop)
        super().handle_exit(sig, frame)

    def _begin_shutdown(self, loop: asyncio.AbstractEventLoop) -> None:
        if self._shutdown_task is None:
            self._shutdown_task = loop.create_task(self._service.begin_shutdown())


def uvicorn_config(app: object, host: str, port: int) -> uvicorn.Config:
    return uvicorn.Config(
        app,
        host=host,
        port=port,
        log_config=None,
        access_log=False,
        timeout_graceful_shutdown=30,
        loop="auto",
        http="auto",
        lifespan="on",
    )
