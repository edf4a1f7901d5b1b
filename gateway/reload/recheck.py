"""`_broker`'s broker_providers_recheck (gateway/core/broker/recheck_tool.py): every live provider link
checked against the credentials as they stand now, and those that no longer stand ended at once.

- WebSocket providers (`/provider/<slot>` sessions, `/providers` sockets): the rule a reload of
  [providers.auth] applies (parts/providers.py, `Unstanding`), with the policy in force as both the
  old and the new one. An adopted identity is read from the device registry at each check
  (gateway/devices/adopted.py), so one revoked there no longer stands: its link is closed with 1008
  and REASON. Configured identities and the shared secret stand until a reload changes them.
- MQTT boards of the plain profile adopted over MQTT (registry rows with transport "mqtt") and
  revoked: on each broker that carries the board's status or link (its hello naming that device, or
  no device), the gateway publishes an empty retained status, so the register frame is gone from the
  broker, and detaches the slot at once, as when the board's will arrives (mosquitto sends none for a
  connection its reload ends). The broker's password file and ACL are what refuse the board from its
  next connection; the gateway does not reload mosquitto.

Serial lines and upstreams are not admitted by a provider credential and are not touched.
"""

from __future__ import annotations

import logging
import sqlite3
from pathlib import Path
from typing import TYPE_CHECKING

from gateway.core.jsonrpc import JsonObject
from gateway.core.link import CLOSE_POLICY
from gateway.core.slots import SlotRegistry
from gateway.devices.registry import DeviceRegistry, default_registry_path
from gateway.reload.parts.providers import Unstanding
from gateway.southbound.websocket.endpoints import ProviderWebSockets

if TYPE_CHECKING:
    from gateway.southbound.mqtt.brokers import MqttBrokers

log = logging.getLogger("gateway.recheck")

REASON = "Provider identity revoked or no longer standing on this gateway; install the device again for a new one"
"""The close reason a WebSocket provider gets (at most 123 bytes: a close frame's room)."""
MQTT_REASON = "device identity revoked (mcp-gateway devices revoke): the gateway emptied its retained status"


class LinkRecheck:
    """The gateway's ways in that carry provider credentials, for ProviderRecheck (gateway/core/provider_recheck.py)."""

    def __init__(
        self,
        sockets: ProviderWebSockets,
        registry: SlotRegistry,
        mqtt: MqttBrokers | None,
        devices: Path | None = None,
    ) -> None:
        self.sockets = sockets
        self.registry = registry
        self.mqtt = mqtt
        self.devices = devices

    async def recheck(self) -> JsonObject:
        """End the links whose credential no longer stands. The result: "ended", one entry per slot (slot,
        transport, identity or device_id, broker, why, how), "count", "close_reason" (what a WebSocket
        provider's close frame said) and "problems" (what could not be done)."""
        ended: list[JsonObject] = []
        problems: list[str] = []
        policy = self.sockets.auth
        unstanding = Unstanding.find(self.sockets, self.registry, policy, policy)
        for slot, transport, identity in unstanding.ended():
            ended.append(
                {
                    "slot": slot,
                    "transport": transport,
                    "identity": identity,
                    "why": f"the identity {identity} no longer stands for this slot (revoked, or adopted anew)"
                    if identity
                    else "it showed no identity and one is required now",
                    "how": f"closed its WebSocket with {CLOSE_POLICY} (policy violation)",
                }
            )
        await unstanding.close(REASON)
        if self.mqtt is not None and any(broker.plain is not None for broker in self.mqtt.brokers):
            ended += self._mqtt(problems)
        if ended:
            log.warning("ended the provider links whose credential no longer stands: %s", _slots(ended))
        return {"ended": ended, "count": len(ended), "close_reason": REASON, "problems": problems}

    def _mqtt(self, problems: list[str]) -> list[JsonObject]:
        assert self.mqtt is not None
        revoked: list[tuple[str, str]] = []
        path = self.devices if self.devices is not None else default_registry_path()
        if path.exists():
            registry = DeviceRegistry(path)
            try:
                revoked = [
                    (row.device_id, row.slot)
                    for row in registry.devices()
                    if row.transport == "mqtt" and row.adopted and row.revoked and row.slot
                ]
            except (sqlite3.Error, OSError) as exc:
                problems.append(f"the device registry {path} cannot be read ({exc}): MQTT boards were not checked")
            finally:
                registry.close()
        ended: list[JsonObject] = []
        for device_id, slot in revoked:
            for broker in self.mqtt.brokers:
                done = broker.plain.withdraw(slot, device_id, MQTT_REASON) if broker.plain is not None else None
                if done is None:
                    continue
                cleared = done["retained_status"] == "cleared"
                status = f"the retained status {done['status_topic']} on {done['broker']}"
                how = f"emptied {status}" if cleared else f"{status} {done['retained_status']}"
                how += "; detached the slot" if done["detached"] else "; the slot was not attached"
                ended.append(
                    {
                        "slot": slot,
                        "transport": "mqtt",
                        "device_id": device_id,
                        "broker": done["broker"],
                        "why": f"device {device_id} was revoked",
                        "how": how,
                    }
                )
                if not cleared:
                    problems.append(f"{slot}: the retained status on {done['broker']} was {done['retained_status']}")
        return ended


def _slots(ended: list[JsonObject]) -> str:
    return ", ".join(
        f"{entry['slot'] or 'a /providers socket without a slot'} ({entry['transport']})" for entry in ended
    )
