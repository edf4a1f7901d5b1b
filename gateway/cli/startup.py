"""What `run` refuses before it binds, asked once for both `run` and `config check`: the same checks, the
same words, the same exit code (2), whatever the machine (udev, a resolvable host) they depend on."""

from __future__ import annotations

import contextlib
import ipaddress
import os
import socket

from gateway import event_loop
from gateway.cli.common import refuse_insecure_bind
from gateway.config import ConfigError, GatewayConfig, TelemetryConfigError, resolve_telemetry


def startup_refusal(config: GatewayConfig, *, warn: bool = True) -> str | None:
    """Why `run` would not start with `config`, or None.

    First the address to listen on (a mistyped host is named as such, not refused as a LAN bind without
    authentication), then the LAN-bind rule, then what start-up builds from the configuration in the
    order `run` builds it: the event loop, telemetry (OTEL_* applied, its headers file read), the audit
    file (one that can never hold the trail), the TLS
    pair, the client authentication verifiers (token and key files read) and the serial hot-plug
    backend. Each is the check the running gateway makes itself, called here first. `warn`: say what
    starts with a warning (a certificate ending soon); `run` says it once logging is up."""
    try:
        check_listen_address(config.host)
    except ConfigError as exc:
        return str(exc)
    refusal = refuse_insecure_bind(config)
    if refusal is not None:
        return refusal
    try:
        check_startup(config, warn=warn)
    except ConfigError as exc:
        return str(exc)
    return None


def check_startup(config: GatewayConfig, *, warn: bool = True) -> None:
    """ConfigError (the message naming the key or the file) for what start-up would refuse beyond the
    address and the LAN-bind rule."""
    try:
        event_loop.loop_factory(config.event_loop)
    except event_loop.EventLoopUnavailable as exc:
        raise ConfigError(str(exc)) from exc
    try:
        resolve_telemetry(config.telemetry, os.environ)  # as gateway/telemetry/exporting.py resolves it
    except TelemetryConfigError as exc:
        raise ConfigError(str(exc)) from exc
    check_audit_path(config)
    if config.tls.enabled:
        from gateway.policy.tls import ServerTls

        ServerTls(config.tls, warn=warn)
    from gateway.policy.client_auth import check_client_auth

    check_client_auth(config)
    if config.serial.hotplug.enabled:
        from gateway.southbound.serial.hotplug import check_backend  # pyserial loads only with hot-plug on

        check_backend(config.serial.hotplug)


def check_audit_path(config: GatewayConfig) -> None:
    """ConfigError naming the [audit] path when the trail `run` would write (a [policy], audit on) can
    never be kept there: the trail itself would only refuse every governed call."""
    if config.policy is None or not config.audit.enabled:
        return
    from gateway.policy.audit.location import audit_path, unusable_audit_path

    path = audit_path(config.audit)
    why = unusable_audit_path(path)
    if why is None:
        return
    if config.audit.path:
        raise ConfigError(f"setting 'audit.path': {path} cannot hold the audit trail: {why}")
    raise ConfigError(
        f"the default audit file {path} (no [audit] path set) cannot hold the audit trail: {why}; or set [audit] path"
    )


EVERY_INTERFACE_HINT = "0.0.0.0 for every interface over IPv4, :: over IPv6; 127.0.0.1 or ::1 for this machine only"


def _address_hint(host: str) -> str:
    """What to write instead of `host`: an IPv6 address without brackets, a link-local one with its
    interface; else the usual choices."""
    if host.startswith("[") and host.endswith("]"):
        return f"write the IPv6 address without brackets: host = {host[1:-1]!r} (--host {host[1:-1]})"
    with contextlib.suppress(ValueError):
        address = ipaddress.ip_address(host)
        if isinstance(address, ipaddress.IPv6Address) and address.is_link_local and address.scope_id is None:
            return (
                f"a link-local address is bound on one interface: name it after a %, e.g. {host}%eth0 "
                f"(or give an address of this machine: {EVERY_INTERFACE_HINT})"
            )
    return f"give an address of this machine ({EVERY_INTERFACE_HINT})"


def check_listen_address(host: str) -> None:
    """ConfigError naming `host` unless every address it resolves to can be listened on here, as the
    listener resolves and binds it (asyncio's create_server: "" is every interface). Each address is
    bound on a port of the system's choosing and closed at once, so the configured port stays free."""
    try:
        found = socket.getaddrinfo(host or None, 0, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except (OSError, UnicodeError) as exc:  # socket.gaierror is an OSError; UnicodeError: a label too long
        reason = getattr(exc, "strerror", None) or exc
        raise ConfigError(
            f"setting 'host': {host!r} is not an address, nor a name that resolves to one ({reason}); "
            f"{_address_hint(host)}"
        ) from exc
    for family, kind, protocol, _, address in found:
        try:
            probe = socket.socket(family, kind, protocol)
        except OSError:
            continue  # a family this system lacks: the listener skips it too
        with probe:
            if family == socket.AF_INET6:
                probe.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)  # as create_server binds it
            try:
                probe.bind((address[0], 0, *address[2:]))
            except OSError as exc:
                named = f"{host!r}" if address[0] == host else f"{host!r}, which resolves to {address[0]}"
                raise ConfigError(
                    f"setting 'host': cannot listen on {named}: {exc.strerror or exc}; {_address_hint(host)}"
                ) from exc
