"""Accepted declarations: one per provider identity, one owner identity per domain, and which slots
hold a live one (the link that declared it is still connected)."""

from __future__ import annotations

from dataclasses import dataclass

from gateway.policy.declarations.validation import Declaration


@dataclass(frozen=True)
class Binding:
    """A slot whose provider's declaration is live: the identity and the link (one connection) it came on."""

    identity: str
    link: object


class DeclarationRegistry:
    """Declarations by identity, domain owners and live slots.

    Ownership follows the identity, not the slot, and stays for the gateway's lifetime even when the
    owner disconnects: a network cut must not hand a domain to someone else. An identity holds one
    declaration, so it owns one domain; its new declaration replaces the old one (and may move it to
    another domain). Bounded by `max_declarations` identities."""

    def __init__(self, max_declarations: int) -> None:
        self.max_declarations = max_declarations
        self.declarations: dict[str, Declaration] = {}
        self.owners: dict[str, str] = {}
        """Domain -> the identity whose declaration holds it."""
        self.bindings: dict[str, Binding] = {}
        """Slot -> the link whose declaration is live there."""
        self.accepted = 0
        self.refused = 0

    def owner_of(self, domain: str) -> str | None:
        return self.owners.get(domain)

    def has_room(self, identity: str | None) -> bool:
        """Whether `identity` may hold a declaration: it holds one already, or there is room for one more."""
        return identity in self.declarations or len(self.declarations) < self.max_declarations

    def accept(self, declaration: Declaration, link: object) -> None:
        """Hold `declaration` (replacing its identity's previous one) and make it live on its slot's `link`
        only: the identity's other slots hold nothing live until they declare again."""
        previous = self.declarations.get(declaration.identity)
        if previous is not None and previous.domain != declaration.domain:
            self.owners.pop(previous.domain, None)
        self.declarations[declaration.identity] = declaration
        self.owners[declaration.domain] = declaration.identity
        # Live only where it was sent: a slot the identity declared on before would otherwise answer
        # with this declaration, whose namespace lies under another slot.
        for slot in self.live_slots(declaration.identity):
            del self.bindings[slot]
        self.bindings[declaration.slot] = Binding(declaration.identity, link)
        self.accepted += 1

    def live(self, slot: str, link: object) -> Declaration | None:
        """The declaration in force for the provider on `slot`, when `link` is the one that declared there."""
        binding = self.bindings.get(slot)
        if binding is None or binding.link is not link:
            return None
        return self.declarations.get(binding.identity)

    def unbind(self, slot: str, link: object) -> bool:
        """`link` is gone: its slot's declaration is no longer live (the identity keeps it and its domain)."""
        binding = self.bindings.get(slot)
        if binding is None or binding.link is not link:
            return False
        del self.bindings[slot]
        return True

    def live_slots(self, identity: str) -> list[str]:
        return sorted(slot for slot, binding in self.bindings.items() if binding.identity == identity)
