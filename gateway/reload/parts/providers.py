"""[providers.auth] at run time: the mode, the shared secret, the identities and the slots each may publish.

New WebSocket providers are admitted by the new rules from the next upgrade on. A provider connected now
keeps its link while its credential still stands: the same identity with the same secret, its slot
still among those the identity may publish. One whose identity was removed, whose secret changed, or
whose slot is no longer allowed is closed (1008, with the reason) at once: removing an identity is how
an operator revokes a device, and waiting for it to reconnect would leave it serving. A `/providers`
socket whose identity stands but lost some slots keeps the others. Providers on other transports
(serial, MQTT, upstreams) are not admitted by [providers.auth] and are not touched.

`Unstanding` finds and closes those links; `_broker`'s broker_providers_recheck (gateway/reload/recheck.py)
applies it with the policy in force, for an identity revoked in the device registry.
"""

from __future__ import annotations

import asyncio
import contextlib

from gateway.config import GatewayConfig, ProviderAuthConfig
from gateway.core.link import CLOSE_POLICY, close_reason
from gateway.core.provider_session import ProviderSession
from gateway.core.slots import SlotRegistry
from gateway.policy.provider_auth import ProviderAuthPolicy, ProviderCredential
from gateway.reload.context import Context, Prepared
from gateway.reload.diff import change_text, keyed_changes
from gateway.southbound.websocket.endpoints import PROVIDER_SOCKETS_KEY, MultiplexedSocket, ProviderWebSockets

OWNS = ("providers.auth",)
REVOKED = "Provider credential withdrawn by a configuration reload ([providers.auth]); reconnect with a current one"
CLOSE_WAIT_S = 2.0
"""How long closing one provider's socket may take (a peer that does not answer the close frame)."""
DEDICATED = "websocket"
MULTIPLEXED = "websocket-mux"


class Unstanding:
    """The WebSocket provider links whose credential does not stand under a policy: what a reload of
    [providers.auth] closes, and what `_broker`'s broker_providers_recheck closes (gateway/reload/recheck.py)."""

    def __init__(self) -> None:
        self.sockets: list[MultiplexedSocket] = []
        self.sessions: list[ProviderSession] = []

    @classmethod
    def find(
        cls,
        sockets: ProviderWebSockets,
        registry: SlotRegistry,
        previous: ProviderAuthPolicy,
        policy: ProviderAuthPolicy,
    ) -> Unstanding:
        """Every link `previous` admitted whose credential `policy` does not let stand (its identity is
        gone or revoked, its secret changed, its slot no longer allowed). A `/providers` socket whose
        identity stands takes `policy`'s credential and loses only the slots it no longer allows."""
        found = cls()
        for socket in list(sockets.sockets):
            credential = policy.standing(previous, socket.credential.identity)
            if credential is None:
                found.sockets.append(socket)
                continue
            socket.credential = credential  # slots it claims from now on are checked by the new patterns
            found.sessions += [s for slot, s in socket.sessions.items() if not credential.allows(slot)]
        for session in registry.live_sessions():
            info = session.link.info
            if info.transport != DEDICATED:
                continue
            credential = policy.standing(previous, info.identity)
            if credential is None or not credential.allows(session.slot):
                found.sessions.append(session)
        return found

    def ended(self) -> list[tuple[str | None, str, str | None]]:
        """(slot, transport, identity) of each link closed: a `/providers` socket without a slot yet as None."""
        links: list[tuple[str | None, str, str | None]] = []
        for socket in self.sockets:
            slots: list[str | None] = [*sorted(socket.sessions)] or [None]
            links += [(slot, MULTIPLEXED, socket.credential.identity) for slot in slots]
        links += [(s.slot, s.link.info.transport, s.link.info.identity) for s in self.sessions]
        return links

    async def close(self, reason: str) -> None:
        """Close them with 1008 and `reason`: a whole socket, or the one slot's session."""
        for socket in self.sockets:
            with contextlib.suppress(Exception):
                message = close_reason(reason).encode()
                await asyncio.wait_for(socket.ws.close(code=CLOSE_POLICY, message=message), CLOSE_WAIT_S)
        for session in self.sessions:
            await session.close(CLOSE_POLICY, reason)


class ProvidersSwap(Prepared):
    def __init__(
        self, changes: list[str], sockets: ProviderWebSockets, policy: ProviderAuthPolicy, registry: SlotRegistry
    ) -> None:
        super().__init__(changes)
        self.sockets = sockets
        self.policy = policy
        self.registry = registry
        self.doomed = Unstanding()
        self.previous: ProviderAuthPolicy | None = None
        self.credentials: list[tuple[MultiplexedSocket, ProviderCredential]] = []

    def swap(self) -> None:
        previous, self.sockets.auth = self.sockets.auth, self.policy
        self.previous = previous
        # find() hands each standing /providers socket the new credential: an undo gives back the old ones.
        self.credentials = [(socket, socket.credential) for socket in self.sockets.sockets]
        self.doomed = Unstanding.find(self.sockets, self.registry, previous, self.policy)

    def undo(self) -> None:
        if self.previous is None:
            return
        self.sockets.auth = self.previous
        for socket, credential in self.credentials:
            socket.credential = credential
        self.doomed = Unstanding()  # nothing is closed

    async def settle(self) -> list[str]:
        closed = sorted({slot for socket in self.doomed.sockets for slot in socket.sessions})
        closed += sorted(session.slot for session in self.doomed.sessions)
        await self.doomed.close(REVOKED)
        if not closed and not self.doomed.sockets:
            return []
        slots = ", ".join(closed) or "no slot yet"
        return [f"providers.auth: closed the links whose credential no longer stands ({slots})"]


def describe(before: ProviderAuthConfig, after: ProviderAuthConfig) -> list[str]:
    lines = [change_text("providers.auth.mode", before.mode, after.mode)] if before.mode != after.mode else []
    identities = keyed_changes(
        "providers.auth.identities",
        {entry.name: (entry.secret_sha256(), tuple(entry.slots)) for entry in before.identities},
        {entry.name: (entry.secret_sha256(), tuple(entry.slots)) for entry in after.identities},
    )
    lines += [identities] if identities else []
    if before.shared_secret != after.shared_secret and before.mode == after.mode == "shared":
        lines.append("providers.auth.shared_secret changed")
    return lines or ["providers.auth changed"]


def prepare(old: GatewayConfig, new: GatewayConfig, context: Context) -> Prepared | None:
    before, after = old.providers.auth, new.providers.auth
    if before == after:
        return None
    gateway = context.running.gateway
    sockets = context.running.app[PROVIDER_SOCKETS_KEY]
    policy = ProviderAuthPolicy(after, gateway.metrics)
    return ProvidersSwap(describe(before, after), sockets, policy, gateway.registry)
