"""Who of a catalog's listeners (`_all`, /mcp, /mcp/<group>) hears `notifications/tools/list_changed`.

Each listener is told only of a change of the list its own caller would get from tools/list (the same
filtering: a slot's scopes, the policy), or of a change its slot's provider announced for tools it can
see; so a caller never learns that a device hidden from it came or went. A listener's view is kept as a
fingerprint: each listed tool's slot, name and provider's dict (compared by identity: a catalog keeps a
provider's dict while it lists the same tool). Views are worked out once per change per caller, not per
listener: listeners of one principal share one computation.

A listener whose caller is judged again while it listens (a 2026-07-28 `subscriptions/listen` stream,
a `FollowedCaller`) is judged by the principal it holds at each comparison; when its standing changes
(a reload or a token file gave its token other scopes), the view it may see now is compared at once with
the one it was last told of, and a difference is news to it (`FollowedCaller.readopted`). One whose
credential has not been judged since the configuration changed (`stale`) is not compared by a rebuild:
its credential is judged first (`rejudge_soon`), and the comparison follows with the scopes it holds now.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Collection, Hashable, Iterable, KeysView

from gateway.core.jsonrpc import JsonObject
from gateway.core.principal import Principal
from gateway.core.slots import Listener

MAX_SHARED_VIEWS = 1024
"""Callers whose view is kept between two changes for the next attach or listing; past it, worked out each time."""


class View:
    """What one caller's tools/list showed: (slot, name here, provider's tool dict) per listed tool."""

    __slots__ = ("entries", "slots")

    def __init__(self, entries: Iterable[tuple[str, str, JsonObject]]) -> None:
        self.entries = tuple(entries)
        self.slots = frozenset(slot for slot, _, _ in self.entries)

    def same_as(self, other: View) -> bool:
        return len(self.entries) == len(other.entries) and all(
            slot == old_slot and name == old_name and tool is old_tool
            for (slot, name, tool), (old_slot, old_name, old_tool) in zip(self.entries, other.entries, strict=True)
        )


class FollowedCaller(ABC):
    """A listener whose caller may be judged again while it listens, with other scopes: the views it is
    attached to register here, so a change of its standing is compared where its list_changed is decided."""

    principal: Principal

    def __init__(self) -> None:
        self.judged_by: list[ListenerViews] = []

    @abstractmethod
    def deliver(self, message: JsonObject) -> None: ...

    @abstractmethod
    def slot_reclaimed(self) -> None: ...

    @abstractmethod
    def stale(self) -> bool:
        """Whether its principal may be out of date: its credential not judged since the configuration changed."""

    @abstractmethod
    def rejudge_soon(self) -> None:
        """Judge its credential again (soon: it may wait on an authorization server), then `readopted`."""

    def readopted(self) -> bool:
        """Its credential was judged again: True when what it may list now differs, in a view it is attached
        to, from what it was last told of (each such view is taken as told)."""
        return any([views.rejudge(self) for views in self.judged_by])  # a list: every view updated


class ListenerViews:
    """Each listener and the view it was last told of (or had when it attached or last listed)."""

    def __init__(self, view_of: Callable[[Principal], View]) -> None:
        self.view_of = view_of
        """The view a caller gets now (the catalog as it is, filtered for it)."""
        self._told: dict[Listener, View] = {}
        self._shared: dict[Principal, View] = {}
        """Views worked out since the last change, by caller (bounded by MAX_SHARED_VIEWS)."""

    @property
    def listeners(self) -> KeysView[Listener]:
        return self._told.keys()

    def _view(self, principal: Principal) -> View:
        view = self._shared.get(principal)
        if view is None:
            view = self.view_of(principal)
            if len(self._shared) < MAX_SHARED_VIEWS:
                self._shared[principal] = view
        return view

    def attach(self, listener: Listener) -> None:
        """`listener` starts listening: what its caller sees now is no news to it."""
        self._told[listener] = self._view(listener.principal)
        if isinstance(listener, FollowedCaller) and self not in listener.judged_by:
            listener.judged_by.append(self)

    def detach(self, listener: Listener) -> None:
        self._told.pop(listener, None)
        if isinstance(listener, FollowedCaller) and self in listener.judged_by:
            listener.judged_by.remove(self)

    def rejudge(self, listener: Listener) -> bool:
        """`listener`'s caller was judged again (it may hold other scopes): True when its view differs from
        the one it was last told of; the view it has now is taken as told."""
        before = self._told.get(listener)
        if before is None:
            return False
        view = self._told[listener] = self._view(listener.principal)
        return not view.same_as(before)

    def listed(self, listener: Hashable | None, principal: Principal) -> None:
        """The caller of `listener` (a request's session, None for none) listed the tools: what it got is no
        news to it."""
        if listener is not None and listener in self._told:
            self._told[listener] = self._view(principal)

    def changed(self, noticed: Collection[str] = ()) -> list[Listener]:
        """The catalog changed (a rebuild): the listeners whose view differs from the one they were last
        told of, and those that see (or saw) a tool of a slot in `noticed`, whose provider announced a
        change of its own. Each one's view is taken as told."""
        self._shared.clear()
        told: list[Listener] = []
        # Listeners of one caller were told of one View object: each pair of old and new view is judged once.
        verdicts: dict[tuple[int, int], bool] = {}
        for listener, before in list(self._told.items()):
            if isinstance(listener, FollowedCaller) and listener.stale():
                listener.rejudge_soon()  # compared once its scopes are known (`before` kept as told)
                continue
            view = self._view(listener.principal)
            pair = (id(before), id(view))  # both held in this loop, so neither id is reused meanwhile
            tell = verdicts.get(pair)
            if tell is None:
                tell = verdicts[pair] = not view.same_as(before) or (
                    bool(noticed) and not (view.slots.isdisjoint(noticed) and before.slots.isdisjoint(noticed))
                )
            if tell:
                told.append(listener)
            self._told[listener] = view
        return told
