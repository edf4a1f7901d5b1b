"""[[upstreams.stdio]] and [[upstreams.remote]] at run time: start new ones, stop removed ones, restart
changed ones; an unchanged one keeps running, and its slot keeps its provider session.

An upstream is matched by its name (its slot). Swapping reserves the new slots and hands a changed
slot to its new manager at once, so no board can claim it in between; the old child or connection is
halted (no more restarts) and then stopped while settling, its pending callers told why. A removed
upstream's slot is freed once it has stopped: a board may claim it then. A new upstream whose name a
board holds takes the slot: the board is closed with the reason (the operator configured the name).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from gateway.config import GatewayConfig, RemoteUpstreamConfig, StdioUpstreamConfig
from gateway.core.link import CLOSE_POLICY
from gateway.core.names import SlotNameError
from gateway.core.slots import SlotRefused, UpstreamManager
from gateway.reload.context import Context, Prepared
from gateway.reload.report import Refused
from gateway.southbound.remote.upstreams import RemoteUpstream, RemoteUpstreams
from gateway.southbound.stdio.supervisor import StdioSupervisor, StdioUpstreams

OWNS = ("upstreams",)
REMOVED = "upstream removed by a configuration reload"
RESTARTED = "upstream restarted by a configuration reload"
TAKEN = "Slot now served by a configured upstream (configuration reload); this provider was closed"

Config = StdioUpstreamConfig | RemoteUpstreamConfig
Manager = StdioSupervisor | RemoteUpstream


@dataclass
class Diff:
    """What changes among the upstreams, by slot name."""

    added: list[Config] = field(default_factory=list)
    removed: list[Manager] = field(default_factory=list)
    changed: list[tuple[Manager, Config]] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.added or self.removed or self.changed)


def diff(running: list[Manager], configured: list[Config]) -> Diff:
    """Match running managers and configured entries by name; an entry of another kind under the same
    name (stdio <-> remote) is a change too."""
    found = Diff()
    by_name = {manager.name: manager for manager in running}
    for config in configured:
        manager = by_name.pop(config.name, None)
        if manager is None:
            found.added.append(config)
        elif type(manager.config) is not type(config) or manager.config != config:
            found.changed.append((manager, config))
    found.removed = list(by_name.values())
    return found


def kind(item: Config | Manager) -> str:
    config = item if isinstance(item, StdioUpstreamConfig | RemoteUpstreamConfig) else item.config
    return "stdio" if isinstance(config, StdioUpstreamConfig) else "remote"


def describe(found: Diff) -> list[str]:
    lines = []
    for which in ("stdio", "remote"):
        said = [
            (verb, names)
            for verb, names in (
                ("added", [c.name for c in found.added if kind(c) == which]),
                ("removed", [m.name for m in found.removed if kind(m) == which]),
                ("restarted", [c.name for _, c in found.changed if kind(c) == which]),
            )
            if names
        ]
        if said:
            lines.append(f"upstreams.{which}: " + "; ".join(f"{verb} {', '.join(names)}" for verb, names in said))
    return lines


class UpstreamsSwap(Prepared):
    def __init__(self, changes: list[str], found: Diff, context: Context) -> None:
        super().__init__(changes)
        self.found = found
        self.stdio: StdioUpstreams = context.running.stdio_upstreams
        self.remote: RemoteUpstreams = context.running.remote_upstreams
        self.registry = context.running.gateway.registry
        self.started: list[Manager] = []
        self.made: set[str] = set()
        """Slots the swap made for new upstreams (an undo forgets them again)."""
        self.before: tuple[list[StdioSupervisor], list[RemoteUpstream], dict[str, UpstreamManager | None]] | None = None
        self.halting: asyncio.Handle | None = None

    def _add(self, config: Config) -> Manager:
        return self.stdio.add(config) if isinstance(config, StdioUpstreamConfig) else self.remote.add(config)

    def swap(self) -> None:
        # What an undo puts back, whatever part of the adds below has run (one may fail half-way).
        names = [config.name for config in [*self.found.added, *(config for _, config in self.found.changed)]]
        self.before = (
            list(self.stdio.supervisors),
            list(self.remote.upstreams),
            {name: self.registry.managers.get(name) for name in names},
        )
        self.made = {name for name in names if name not in self.registry.slots}
        # New managers first: each reserves its slot (checked to fit by prepare) before anything stops.
        for config in [*self.found.added, *(config for _, config in self.found.changed)]:
            self.started.append(self._add(config))
        # A halt cannot be taken back (it wakes the manager's loop at once), so it runs as soon as the loop
        # turns, once every part has swapped; an undone reload cancels it. Stopped while settling.
        self.halting = asyncio.get_running_loop().call_soon(self._halt)

    def _halt(self) -> None:
        for manager in [*self.found.removed, *(manager for manager, _ in self.found.changed)]:
            manager.halt()  # no more restarts

    def undo(self) -> None:
        """Drop the managers the swap made (none started yet), hand each slot back to the manager it had,
        and forget the slots the swap made."""
        if self.halting is not None:
            self.halting.cancel()
        if self.before is None:
            return
        supervisors, upstreams, managers = self.before
        self.stdio.supervisors[:] = supervisors
        self.remote.upstreams[:] = upstreams
        for name, manager in managers.items():
            current = self.registry.managers.get(name)
            if current is not None and current is not manager:
                self.registry.unmanage(name, current)
            if manager is not None and current is not manager:
                self.registry.manage(name, manager)  # its slot exists: admitted as it was
        for name in self.made:
            self.registry.forget(name)
        self.started, self.made, self.before = [], set(), None

    async def settle(self) -> list[str]:
        for manager in self.found.removed:
            await self._remove(manager, REMOVED)
        for manager, _ in self.found.changed:
            await self._remove(manager, RESTARTED)
        notes = []
        for manager in self.started:
            # Old managers are stopped by now: a provider still holding the slot is a board that had it.
            session = self.registry.slots[manager.name].live
            if session is not None:
                await session.close(CLOSE_POLICY, TAKEN)
                notes.append(f"upstreams: slot {manager.name} taken from the {session.link.info.transport} provider")
            if not (self.stdio.halted if isinstance(manager, StdioSupervisor) else self.remote.halted):
                manager.start()  # not once shutdown has begun
        return notes

    async def _remove(self, manager: Manager, reason: str) -> None:
        if isinstance(manager, StdioSupervisor):
            await self.stdio.remove(manager, reason)
        else:
            await self.remote.remove(manager, reason)


def check_room(names: list[str], context: Context, new: GatewayConfig) -> None:
    """Every new slot name may be used and fits under limits.max_slots, or the reload is refused."""
    registry = context.running.gateway.registry
    problems = []
    for name in names:
        try:
            registry.check_name(name)
        except (SlotNameError, SlotRefused) as exc:
            problems.append(f"upstreams: {name}: {exc}")
    missing = [name for name in names if name not in registry.slots]
    if missing:
        # Counted as the slot table admits them at the swap (SlotRegistry.slot, under the new bound): a
        # vacant slot it may forget makes room, but not one a new upstream takes over itself.
        vacant = sum(1 for name in registry.vacant_names() if name not in names)
        room = new.limits.max_slots - len(registry.slots) + vacant
        if len(missing) > room:
            problems.append(
                f"upstreams: no room for {len(missing)} new slot(s) under limits.max_slots = {new.limits.max_slots} "
                f"({len(registry.slots) - vacant} slots in use now, vacant ones forgotten); raise limits.max_slots"
            )
    if problems:
        raise Refused(*problems)


def prepare(old: GatewayConfig, new: GatewayConfig, context: Context) -> Prepared | None:
    running: list[Manager] = [*context.running.stdio_upstreams.supervisors, *context.running.remote_upstreams.upstreams]
    found = diff(running, [*new.upstreams.stdio, *new.upstreams.remote])
    if not found:
        return None
    check_room([config.name for config in found.added], context, new)
    return UpstreamsSwap(describe(found), found, context)
