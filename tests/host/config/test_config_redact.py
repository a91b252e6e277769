"""Secrets never appear in a printed configuration."""

import json

from aviso_host.config import redact, settings_from_document
from aviso_host.config.redact import MIN_MASKED_LENGTH, REDACTED, mask_secrets, secret_values
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


# -- secrets in free text (log lines, error messages) -------------------------------------


def test_a_secret_is_masked_as_a_whole_token_wherever_it_stands() -> None:
    secret = "hunter2-x9"
    texts = {
        f"token {secret} refused": f"token {REDACTED} refused",
        f'{{"detail":"{secret}"}}': f'{{"detail":"{REDACTED}"}}',
        f"nats://aviso:{secret}@host": f"nats://aviso:{REDACTED}@host",
        f"first line\\n{secret}": f"first line\\n{REDACTED}",  # after a JSON escape
        f"({secret}).": f"({REDACTED}).",
    }
    for text, masked in texts.items():
        assert mask_secrets(text, {secret}) == masked, text
    # Inside a JSON string, with its quotes and backslashes escaped.
    quoted = 'pa"ss\\word-42'
    line = json.dumps({"message": f"refused {quoted}"})
    assert quoted not in json.loads(mask_secrets(line, {quoted}))["message"]


def test_a_secret_is_never_masked_inside_another_word() -> None:
    secrets = {"forecast", "product1"}
    text = '{"event_type":"ens_forecast_products","topic":"forecasts.product10"}'
    assert mask_secrets(text, secrets) == text
    assert mask_secrets("forecast: product1", secrets) == f"{REDACTED}: {REDACTED}"


def test_secrets_too_short_to_matter_are_shown_only_masked_in_the_configuration() -> None:
    document = {"x": {"password": "prod", "token": "long-enough-token"}}
    found = secret_values(document, frozenset())
    assert found == {"long-enough-token"}
    assert len("prod") < MIN_MASKED_LENGTH
    assert redact(document)["x"] == {"password": REDACTED, "token": REDACTED}
    assert mask_secrets("ens_product prod", found) == "ens_product prod"
