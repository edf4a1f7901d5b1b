"""Tool names over many slots: `<slot><separator><tool>`, safe characters, at most 64, unique
(docs/protocol-clients.md, "`_all`", "Tool groups").

`_all` uses "-" (`<slot>-<tool>`); the tool-group endpoints /mcp use `groups_separator`, "__" by default
(`<slot>__<tool>`, as the original MCP bridge named them). The rules are the same for both.

A slot or tool name with a character outside ASCII is written `<sanitized name>_<8 hex digits of its
SHA-256>` (`小智-客厅` reads `__-___<hash>`): sanitizing turns every such character into `_`, so without
the hash all names of one length in one script would read alike and be told apart only by the order
they first appeared in. ASCII names keep their plain sanitized form."""

from __future__ import annotations

import hashlib
import heapq
import re
from collections.abc import Iterable

MAX_NAME = 64
RETIRED_PER_SLOT = 4
"""Departed names a name book (_all's, the groups') remembers per slot of limits.max_slots."""
HASH_DIGITS = 8
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")


def sanitize(text: str) -> str:
    return _UNSAFE.sub("_", text)


def name_part(name: str) -> str:
    """A slot or tool name as it is written in an aggregate name: sanitized, plus a hash of the name
    when it is not ASCII."""
    if name.isascii():
        return sanitize(name)
    digest = hashlib.sha256(name.encode("utf-8", errors="surrogatepass")).hexdigest()[:HASH_DIGITS]
    return f"{sanitize(name)}_{digest}"


def _short_hash(slot: str, tool: str) -> str:
    return hashlib.sha256(f"{slot}\x00{tool}".encode("utf-8", errors="surrogatepass")).hexdigest()[:HASH_DIGITS]


def base_name(slot: str, tool: str, separator: str = "-") -> str:
    """The name before collision handling; long names are cut and given a hash of the full pair."""
    name = name_part(slot) + sanitize(separator) + name_part(tool)
    if len(name) > MAX_NAME:
        name = f"{name[: MAX_NAME - HASH_DIGITS - 1]}-{_short_hash(slot, tool)}"
    return name


class NameBook:
    """Aggregate names that keep their meaning while the gateway runs, with one exception below.

    The first time a (slot, tool) pair is seen it gets the rule's name (or a -2, -3, ... variant when
    another pair holds that name). From then on the pair keeps that name, and no other pair is ever
    given it, even after the pair's provider left. So a client holding an old tools/list can never
    reach a different device's tool by calling a name it remembers: the name either still means the
    same tool or is unknown. Up to `max_retired` names of departed pairs are remembered; past it the
    book forgets from the slot holding the most (see _forget_retired), so a departed name can be given
    again only after more than `max_retired` distinct slots each hold departed names.

    The exception: a name `<S><separator><rest>` belongs to the slot S with the longest name among the
    present slots whose name, then the separator, starts it (names as written, name_part). Slot names
    are the operator's and tool names the provider's, so a tool never takes a name in another slot's
    namespace: clients build `<slot><separator><tool>` from the documented rule and must reach that
    slot (slot `pump` with tool `1-stop` and slot `pump-1` with tool `stop` both read `pump-1-stop`,
    which is pump-1's). Of slots written alike (`lab_1`, `lab.1` and `lab 1` all read `lab_1`) the one
    whose name is written unchanged owns their namespace, else the one first in sorted order, so the
    name a client builds from `lab_1` reaches lab_1 whichever joined first (_ranks_before). A new pair
    whose name lies in a present slot's namespace that outranks its own is named after that slot's
    pairs, so it is the one suffixed. And when a name is held by a pair of an outranked slot (named
    while the owner was absent, or had no such tool) and a present pair of the owner wants exactly that
    name, the holder gives it up and is named again with a suffix: for that one case a name changes
    meaning, so that the rule's name reaches the slot it names.
    """

    def __init__(self, separator: str = "-", max_retired: int = 4096) -> None:
        self.separator = separator
        self.max_retired = max_retired
        self.by_pair: dict[tuple[str, str], str] = {}
        """Each pair's name now."""
        self.by_name: dict[str, tuple[str, str]] = {}
        """Every name given and not forgotten, to the pair it means (a pair that took its rule's name from
        a holder keeps its earlier suffixed name reserved here, so that name never means another pair)."""
        self.displaced: set[tuple[str, str]] = set()
        """Pairs whose name is not their rule's name: the only ones a later call may move to it."""

    def names_for(self, entries: Iterable[tuple[str, str]]) -> dict[str, tuple[str, str]]:
        """Map each present (slot, tool), in the given order, to its name."""
        pairs = list(entries)
        unsettled = [pair for pair in pairs if pair not in self.by_pair or pair in self.displaced]
        if unsettled:
            self._settle(dict.fromkeys(unsettled), _owners({pair[0] for pair in pairs}))
        current = {self.by_pair[pair]: pair for pair in pairs}
        self._forget_retired(current)
        return current

    def _settle(self, unsettled: Iterable[tuple[str, str]], present: dict[str, str]) -> None:
        """Name the new pairs and move displaced ones to their rule's name where its holder must give it
        up. Pairs whose name is their own slot's come first, so an intruding pair takes the suffix."""
        owners: list[tuple[tuple[str, str], str]] = []
        intruders: list[tuple[tuple[str, str], str]] = []
        for pair in unsettled:
            base = base_name(pair[0], pair[1], self.separator)
            (intruders if self._intrudes(pair[0], base, present) else owners).append((pair, base))
        for pair, base in owners:
            holder = self.by_name.get(base)
            if holder is not None and holder != pair and self._must_yield(holder[0], pair[0], base):
                self._take_over(pair, base, holder)
            elif pair not in self.by_pair:
                self._assign(pair, self._new_name(base), base)
        for pair, base in intruders:
            if pair not in self.by_pair:
                self._assign(pair, self._new_name(base), base)

    def _intrudes(self, slot: str, name: str, present: dict[str, str]) -> bool:
        """Whether `name` lies in the namespace of a present slot that outranks `slot`: one written alike
        that ranks before it, or a longer one. `present` maps each written slot name to its owner."""
        separator = self.separator
        own = name_part(slot)
        if present.get(own, slot) != slot and name.startswith(own + separator):
            return True
        cut = name.find(separator, len(own) + 1)
        while cut != -1:
            if name[:cut] in present:
                return True
            cut = name.find(separator, cut + 1)
        return False

    def _must_yield(self, holder_slot: str, owner_slot: str, name: str) -> bool:
        """Whether a pair of `holder_slot` holding `name` gives it up to a (present) pair of `owner_slot`."""
        owner = name_part(owner_slot)
        if not name.startswith(owner + self.separator):
            return False
        holder = name_part(holder_slot)
        if len(holder) != len(owner):
            return len(holder) < len(owner)
        return holder == owner and _ranks_before(owner_slot, holder_slot)

    def _take_over(self, pair: tuple[str, str], name: str, holder: tuple[str, str]) -> None:
        self._assign(pair, name, name)
        if self.by_pair.get(holder) == name:  # else `name` was only reserved for it: it keeps its own
            base = base_name(holder[0], holder[1], self.separator)
            self._assign(holder, self._new_name(base), base)

    def _assign(self, pair: tuple[str, str], name: str, base: str) -> None:
        self.by_pair[pair] = name
        self.by_name[name] = pair
        if name == base:
            self.displaced.discard(pair)
        else:
            self.displaced.add(pair)

    def _new_name(self, base: str) -> str:
        name = base
        counter = 2
        while name in self.by_name:
            suffix = f"-{counter}"
            name = base[: MAX_NAME - len(suffix)] + suffix
            counter += 1
        return name

    def _forget_retired(self, current: dict[str, tuple[str, str]]) -> None:
        """Past `max_retired` departed names, forget from the slot that holds the most of them, its
        oldest first (of slots holding equally many, the one with the oldest name). A provider that
        renames its tools again and again thus forgets its own departed names, never another device's:
        a slot's last departed name goes only when more than `max_retired` slots each hold one."""
        excess = len(self.by_name) - len(current) - self.max_retired
        if excess <= 0:
            return
        retired_by_slot: dict[str, list[tuple[int, str]]] = {}
        for age, (name, pair) in enumerate(self.by_name.items()):  # insertion order: oldest first
            if name not in current:
                retired_by_slot.setdefault(pair[0], []).append((age, name))
        # The slot with the most left comes off the heap first; `taken` counts each slot's forgotten names.
        heap = [(-len(names), names[0][0], slot) for slot, names in retired_by_slot.items()]
        heapq.heapify(heap)
        taken = dict.fromkeys(retired_by_slot, 0)
        while excess > 0:
            _, _, slot = heapq.heappop(heap)
            names = retired_by_slot[slot]
            self._forget(names[taken[slot]][1])
            taken[slot] += 1
            excess -= 1
            left = len(names) - taken[slot]
            if left:
                heapq.heappush(heap, (-left, names[taken[slot]][0], slot))

    def _forget(self, name: str) -> None:
        pair = self.by_name.pop(name)
        if self.by_pair.get(pair) == name:
            del self.by_pair[pair]
            self.displaced.discard(pair)


def _ranks_before(slot: str, other: str) -> bool:
    """Of two slots written alike, whether `slot` owns their namespace rather than `other`: a name written
    unchanged (`lab_1`) before one that cleaning changed (`lab.1`, `lab 1`), then the first in sorted
    order, so that which owns it never depends on which joined first."""
    return (name_part(slot) != slot, slot) < (name_part(other) != other, other)


def _owners(slots: Iterable[str]) -> dict[str, str]:
    """Each written slot name among `slots` to the slot that owns its namespace (_ranks_before)."""
    owners: dict[str, str] = {}
    for slot in slots:
        written = name_part(slot)
        held = owners.get(written)
        if held is None or _ranks_before(slot, held):
            owners[written] = slot
    return owners


def aggregate_names(entries: Iterable[tuple[str, str]], separator: str = "-") -> dict[str, tuple[str, str]]:
    """Names for one membership seen fresh: (slot, tool) pairs in the given order to unique names.

    The caller fixes the order (slots sorted by name, tools in provider order), so the same
    membership always yields the same names. In a collision the pair of the slot whose namespace the
    name lies in keeps it (see NameBook: of slots written alike, the one written unchanged, else the
    first in sorted order), else the first does; the others are suffixed -2, -3, ... cut so that the
    whole name still fits in 64 characters.
    """
    return NameBook(separator).names_for(entries)
