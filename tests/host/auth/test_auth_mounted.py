"""Auth keeps its path rules when the app is mounted under a prefix in another ASGI app."""

from __future__ import annotations

import json

import httpx
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Mount, Route

from aviso_host.app import create_app
from aviso_host.config import settings_from_document
from aviso_host.plugins import discover
from tests.conformance.auth_support import body, document
from tests.support.server import serve_app
from tests.support.tokens import bearer, mint


async def _gateway_admin(request: object) -> PlainTextResponse:
    return PlainTextResponse("the gateway's own admin page")


def test_auth_paths_below_a_mount_prefix() -> None:
    registry = discover()
    aviso = create_app(settings_from_document(document("trusted_proxy"), registry), registry)
    gateway = Starlette(
        routes=[Route("/api/v1/admin/page", _gateway_admin), Mount("/aviso", app=aviso)]
    )
    admin = bearer(mint("admin-user", "localrealm", ["admin"]))
    with (
        serve_app(gateway, aviso.state.service) as server,
        httpx.Client(base_url=server.url) as client,
    ):
        missing = client.delete("/aviso/api/v1/admin/wipe/all")
        assert missing.status_code == 401
        assert missing.json()["message"] == "Authorization header is required"
        assert client.delete("/aviso/api/v1/admin/wipe/all", headers=admin).status_code == 200
        garbage = {"Authorization": "Garbage x"}
        assert client.get("/aviso/api/v1/schema", headers=garbage).status_code == 200
        assert client.get("/aviso/health", headers=garbage).status_code == 200
        notify = json.dumps(body("protected_feed"))
        assert client.post("/aviso/api/v1/notification", content=notify).status_code == 401
        posted = client.post("/aviso/api/v1/notification", content=notify, headers=admin)
        assert posted.status_code == 200, posted.text
        # Outside the mount, the gateway's own /api/v1/... paths are not aviso's business.
        assert client.get("/api/v1/admin/page").text == "the gateway's own admin page"
