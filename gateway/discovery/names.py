"""The names the gateway advertises under: its `.local` host name, the SRV target of its own, and the
instance name (with the name it takes when another responder holds it)."""

from __future__ import annotations

import re
import socket

from gateway.config import MDNS_INSTANCE_NAME_BYTES

LABEL_BYTES = 63
"""A DNS label: at most 63 bytes."""
FALLBACK_LABEL = "mcp-gateway"
"""The host label when nothing of the system hostname is a DNS label character."""


def system_hostname() -> str:
    """The system hostname's first label, as `hostname -s` prints it."""
    return socket.gethostname().split(".", 1)[0]


def dns_label(text: str) -> str:
    """`text` as a DNS host label: letters, digits and '-' (anything else becomes '-'), at most 63 bytes."""
    label = re.sub(r"[^A-Za-z0-9-]", "-", text).strip("-")[:LABEL_BYTES].rstrip("-")
    return label or FALLBACK_LABEL


def host_label() -> str:
    """The name the gateway answers address queries for, `<hostname>.local.`; a hostname that is not a
    DNS label (an underscore, say) is answered as its DNS form (`plant_gw` -> `plant-gw.local.`)."""
    return f"{dns_label(system_hostname())}.local."


def host_label_differs() -> str | None:
    """Why the `.local` name differs from the system hostname, or None when it does not."""
    hostname = system_hostname()
    answered = host_label().removesuffix(".")
    if f"{hostname}.local".lower() == answered.lower():
        return None
    return (
        f"the system hostname {hostname!r} is not a DNS name (letters, digits, '-'), so the gateway answers "
        f"mDNS as {answered}: boards dial {answered}"
    )


def service_target(port: int, number: int = 1) -> str:
    """The SRV target: `<hostname>-<port>.local.`, a host name of this gateway's own that carries only the
    addresses it serves. A second gateway on the same machine (another port, maybe the other address
    family) has its own, so a browser never mixes the two gateways' addresses. The `number`th name to
    try, when another responder holds it (a machine of the same host name with a gateway on the same
    port): `<hostname>-<port>-2.local.`, `-3` ...; the host name is cut to keep one 63-byte label."""
    suffix = f"-{port}" if number <= 1 else f"-{port}-{number}"
    return f"{dns_label(system_hostname())[: LABEL_BYTES - len(suffix)].rstrip('-')}{suffix}.local."


def default_instance_name() -> str:
    name = f"mcp-gateway on {system_hostname()}"
    return _cut(name, MDNS_INSTANCE_NAME_BYTES).rstrip()


def _cut(text: str, limit: int) -> str:
    """`text` cut to at most `limit` bytes of UTF-8, never inside a character."""
    return text.encode("utf-8")[:limit].decode("utf-8", errors="ignore")


def instance_candidate(instance: str, number: int) -> str:
    """The `number`th name to try: `instance` itself, then `<instance>-2`, `<instance>-3` ...; the
    instance is cut (on a character boundary) so that the name stays one DNS label of 63 bytes."""
    if number <= 1:
        return instance
    suffix = f"-{number}"
    return _cut(instance, MDNS_INSTANCE_NAME_BYTES - len(suffix)) + suffix
