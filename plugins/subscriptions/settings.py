"""The ``subscriptions`` configuration section, declared by this plugin (hook
``aviso_settings_sections``); each delivery kind's options sit in it under the kind's name
(``subscriptions.webhook``), validated by the host against the kind's ``options_schema``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from pydantic import Field

from aviso_plugins.process import SettingsSection
from aviso_plugins.service import ServiceAccess
from aviso_plugins.shapes import read_shape, shape, shape_schema

Positive = Annotated[int, Field(ge=1)]


@shape(closed=True)
@dataclass(frozen=True, slots=True)
class SubscriptionSettings:
    """The ``subscriptions`` section: named subscriptions whose cursor the server keeps."""

    enabled: bool = True
    """``false`` removes the ``/api/v1/subscriptions`` routes."""
    max_per_user: Positive = 100
    """Subscriptions one user may hold (with auth off, all callers share one namespace and
    this cap); beyond it: 429."""
    max_total: Positive = 10_000
    """Subscriptions the server holds in all; beyond it: 429."""
    max_definition_bytes: Positive = 16_384
    """Serialised JSON bytes of one subscription's definition (its polygon, mostly); over
    it: 400."""


SECTION = SettingsSection(("subscriptions",), shape_schema(SubscriptionSettings))


def subscription_settings(service: ServiceAccess) -> SubscriptionSettings:
    """The section as ``service`` is configured, its defaults filled in (the delivery kinds'
    own sections left out)."""
    return read_shape(SubscriptionSettings, service.section(SECTION.key))
