"""[groups.<name>] at run time: groups added, removed, enabled or disabled, their slots, prefixes and
descriptions. Tool names stay those of the gateway's one name book (groups_separator needs a restart),
so a tool keeps its /mcp name; a client on a group that is gone sees it empty and is told the list changed,
and is told again, and lists the group's tools, when a later reload brings the group back."""

from __future__ import annotations

from gateway.config import GatewayConfig
from gateway.core.groups.catalog import GroupCatalog
from gateway.core.groups.views import GroupSpec, specs_from_config
from gateway.reload.context import Context, Prepared
from gateway.reload.diff import keyed_changes

OWNS = ("groups",)


class GroupsSwap(Prepared):
    def __init__(self, changes: list[str], catalog: GroupCatalog, specs: list[GroupSpec]) -> None:
        super().__init__(changes)
        self.catalog = catalog
        self.specs = specs
        self.previous: list[GroupSpec] | None = None

    def swap(self) -> None:
        self.previous = self.catalog.specs
        self.catalog.reconfigure(self.specs)

    def undo(self) -> None:
        # The groups' own targets come back (a removed group's clients hold theirs); a client told its list
        # changed by the swap is told again, and lists what it had.
        if self.previous is not None:
            self.catalog.reconfigure(self.previous)


def prepare(old: GatewayConfig, new: GatewayConfig, context: Context) -> Prepared | None:
    before, after = specs_from_config(old), specs_from_config(new)
    if before == after:
        return None
    line = keyed_changes("groups", {spec.name: spec for spec in before}, {spec.name: spec for spec in after})
    return GroupsSwap([line or "groups: order changed"], context.running.gateway.groups, after)
