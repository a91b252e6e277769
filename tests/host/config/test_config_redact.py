"""Secrets never appear in a printed configuration."""

from aviso_host.config import redact, settings_from_document
from aviso_host.config.redact import REDACTED
from tests.host.config.config_stubs import AUTH_ENABLED, document, make_registry


def test_secret_keys_are_redacted_case_insensitively() -> None:
    redacted = redact(
        {
            "auth": {"jwt_secret": "s", "admin_roles": {"ops": ["admin"]}},
            "ecpds": {"username": "svc", "password": "pw"},
            "notification_backend": {"jetstream": {"token": "t", "nats_url": "nats://n"}},
            "x": {"API_KEY": 1, "Authorization": {"nested": "v"}, "refresh_TOKEN_file": "f"},
        }
    )
    assert redacted == {
        "auth": {"jwt_secret": REDACTED, "admin_roles": {"ops": ["admin"]}},
        "ecpds": {"username": "svc", "password": REDACTED},
        "notification_backend": {"jetstream": {"token": REDACTED, "nats_url": "nats://n"}},
        "x": {"API_KEY": REDACTED, "Authorization": REDACTED, "refresh_TOKEN_file": REDACTED},
    }


def test_url_credentials_are_masked_anywhere() -> None:
    redacted = redact(
        {
            "nats_url": "nats://user:pa55@nats.internal:4222",
            "servers": ["https://svc:pw@ecpds.example/api", "https://plain.example/a@b"],
            "auth_o_tron_url": "http://tok3n@auth:8080/path?q=1",
        }
    )
    assert redacted == {
        "nats_url": f"nats://{REDACTED}@nats.internal:4222",
        "servers": [f"https://{REDACTED}@ecpds.example/api", "https://plain.example/a@b"],
        "auth_o_tron_url": f"http://{REDACTED}@auth:8080/path?q=1",
    }


def test_effective_configuration_redacts_secrets_without_touching_settings() -> None:
    ecpds = {"username": "u", "password": "pw", "servers": ["https://e"], "match_key": "k"}
    doc = document(
        auth=AUTH_ENABLED,
        ecpds=ecpds,
        notification_backend={"kind": "in_memory", "jetstream": {"token": "t"}},
    )
    settings = settings_from_document(doc, make_registry())
    printed = redact(settings.document)
    assert printed["auth"]["jwt_secret"] == REDACTED
    assert printed["ecpds"]["password"] == REDACTED
    assert printed["notification_backend"]["jetstream"]["token"] == REDACTED
    assert settings.auth.jwt_secret == "s3cret"
    assert settings.document["ecpds"]["password"] == "pw"
