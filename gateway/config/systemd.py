"""[systemd]: what the gateway tells the service manager (docs/operations.md, "systemd")."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from gateway.config.base import Section

READY_WAIT_MAX_S = 600.0
"""Far above any sensible start-up; systemd's own TimeoutStartSec= (90 s by default) should stop it first."""


class SystemdConfig(Section):
    """[systemd]: readiness and status notifications over $NOTIFY_SOCKET (nothing is sent without it)."""

    ready_wait_s: Annotated[float, Field(ge=0, le=READY_WAIT_MAX_S)] = 15.0
    """How long READY=1 waits, once the listener is bound, for every configured upstream (stdio, remote, MQTT
    broker, serial port) to connect or finish its first attempt; READY=1 is sent when the wait ends even if one
    has not, so a dead upstream never keeps the service "activating". 0: READY=1 as soon as the listener is
    bound. Keep it below the unit's TimeoutStartSec=."""
    status_interval_s: Annotated[float, Field(ge=0.1, le=3600)] = 1.0
    """STATUS= (the connected slots) is sent when the count changes, at most once per this many seconds."""
