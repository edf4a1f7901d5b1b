"""Calls waiting for a person's approval (`mcp-gateway approve`), and the binding that ties an answer to
one call: the same caller, slot, tool and arguments, used once, before it expires.

An approval is found by the call as the caller sends it (its `attempt`) and holds the call as it is
forwarded (its `binding`, after any clamp): a retry the policy now forwards differently finds its
approval and uses it up, and is refused rather than forwarded on an answer given for other arguments.

Kept in memory: a restart forgets them, and the caller's next attempt asks again (nothing is forwarded
on an approval the gateway no longer holds). Lifetimes run on the monotonic clock: setting the wall clock
(NTP on a board without a real-time clock) neither stretches nor cuts them; the wall clock only says
when an approval was made and decided.
"""

from __future__ import annotations

import hashlib
import secrets
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Any

import orjson

from gateway.core.secret_keys import mask_secrets
from gateway.policy.audit.records import cut_text, masked_keys
from gateway.policy.rules.subjects import identity_of

DEFAULT_MAX_APPROVALS = 256
"""Calls waiting for approval (or approved and not yet used) at once; past it a new one is refused."""
DEFAULT_MAX_APPROVALS_PER_CALLER = 32
"""As many of one caller's: one agent sending many calls to be approved leaves room for the others'."""
MAX_MASKED_NAMED = 16
MAX_MASKED_KEY_CHARS = 64
"""An approval names at most this many masked keys (the rest counted in masked_more), each cut to this many
characters: the list goes to every observer of /_system/broker, for up to max_pending_approvals calls."""


def binding_of(subjects: Collection[str], slot: str, tool: str, arguments: object) -> str:
    """What an approval is bound to: who calls which tool of which slot with which arguments."""
    body = orjson.dumps([sorted(subjects), slot, tool, arguments], option=orjson.OPT_SORT_KEYS)
    return hashlib.sha256(body).hexdigest()


class ApprovalsFull(Exception):
    """Too many calls wait for approval (in all, or the caller's): the new one is refused, none is dropped."""

    def __init__(self, text: str, limit: str) -> None:
        super().__init__(text)
        self.limit = limit
        """The [limits] key reached: max_pending_approvals or max_pending_approvals_per_caller."""


class ApprovalUnknown(Exception):
    """No waiting call has this id (never issued, used, expired, or already decided)."""


@dataclass
class Approval:
    """One call waiting for a person, or decided by one and not yet used."""

    id: str
    attempt: str
    """The call as the caller sends it: what a retry is matched by."""
    binding: str
    """The call as it is forwarded: what the approver approved."""
    principal: tuple[str, ...]
    """Every subject of the call's caller (as shown, and as its retry is matched by)."""
    caller: str
    """The caller's stable identity (identity_of: the subject it authenticated as, as sessions and execution
    limits count it; never its groups or OAuth client): what counts against the per-caller bound, and who
    may not approve it."""
    slot: str
    resource: str
    tool: str
    arguments: Any
    """Masked: secret-looking keys are never shown to the approver."""
    masked: tuple[str, ...]
    """The keys whose values `arguments` hides (at most MAX_MASKED_NAMED): two calls differing only there
    look alike, so the approver is told it approves without seeing them."""
    masked_more: int
    """How many more keys are masked than `masked` names."""
    rule: str
    created_ms: int
    expires_ms: int
    """Wall-clock ms, as shown: when it expires by the wall clock as it read at creation."""
    deadline_s: float
    """When it expires on the monotonic clock (Approvals.monotonic): what expiry goes by."""
    hint: bool | None = None
    """The tool's readOnlyHint, not shown: with slot and tool, what its approver must be allowed to call."""
    state: str = "pending"
    """"pending", "approved" or "denied"."""
    decided_by: str | None = None
    decided_ms: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "state": self.state,
            "principal": list(self.principal),
            "slot": self.slot,
            "resource": self.resource,
            "tool": self.tool,
            "arguments": self.arguments,
            "masked": list(self.masked),
            "masked_more": self.masked_more,
            "rule": self.rule,
            "created_ms": self.created_ms,
            "expires_ms": self.expires_ms,
            "decided_by": self.decided_by,
            "decided_ms": self.decided_ms,
        }


class Approvals:
    """The waiting calls, by id and by attempt; each attempt has at most one."""

    def __init__(
        self,
        limit: int = DEFAULT_MAX_APPROVALS,
        per_caller: int = DEFAULT_MAX_APPROVALS_PER_CALLER,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.limit = limit
        self.per_caller = per_caller
        self.clock = clock
        """The wall clock (unix s): when things happened, as shown and recorded."""
        self.monotonic = monotonic
        """The monotonic clock (s): lifetimes and expiry."""
        self._by_id: dict[str, Approval] = {}
        self._by_attempt: dict[str, Approval] = {}

    def now_ms(self) -> int:
        """Wall-clock ms: for what is shown or recorded, never for a lifetime."""
        return int(self.clock() * 1000)

    def monotonic_ms(self) -> int:
        """Monotonic ms: for lifetimes and expiry."""
        return int(self.monotonic() * 1000)

    def request(
        self,
        attempt: str,
        binding: str,
        principal: Collection[str],
        slot: str,
        resource: str,
        tool: str,
        arguments: object,
        rule: str,
        expires_s: int,
        hint: bool | None = None,
    ) -> Approval:
        """The waiting call for `attempt`: the one already waiting for the same `binding`, or a new one
        (ApprovalsFull past the limit)."""
        self._expire()
        found = self._by_attempt.get(attempt)
        if found is not None and found.state == "pending" and found.binding == binding:
            return found
        if found is not None:
            self._drop(found)
        caller = identity_of(principal)
        self._make_room(caller)
        if len(self._by_id) >= self.limit:
            raise ApprovalsFull(
                f"{len(self._by_id)} calls already wait for approval (limits.max_pending_approvals)",
                "max_pending_approvals",
            )
        waiting = self._of(caller)
        if len(waiting) >= self.per_caller:
            raise ApprovalsFull(
                f"{len(waiting)} calls of this caller already wait for approval "
                "(limits.max_pending_approvals_per_caller)",
                "max_pending_approvals_per_caller",
            )
        now = self.now_ms()
        hidden = list(masked_keys(arguments))
        approval = Approval(
            id=secrets.token_hex(4),
            attempt=attempt,
            binding=binding,
            principal=tuple(sorted(principal)),
            caller=caller,
            slot=slot,
            resource=resource,
            tool=tool,
            arguments=mask_secrets(arguments),
            masked=tuple(str(cut_text(key, MAX_MASKED_KEY_CHARS)) for key in hidden[:MAX_MASKED_NAMED]),
            masked_more=max(0, len(hidden) - MAX_MASKED_NAMED),
            rule=rule,
            created_ms=now,
            expires_ms=now + expires_s * 1000,
            deadline_s=self.monotonic() + expires_s,
            hint=hint,
        )
        while approval.id in self._by_id:  # 32 random bits: a clash is rare, never silent
            approval.id = secrets.token_hex(4)
        self._by_id[approval.id] = approval
        self._by_attempt[attempt] = approval
        return approval

    def take(self, attempt: str) -> Approval | None:
        """The decided approval for `attempt`, used up by this call; None while none is decided."""
        self._expire()
        found = self._by_attempt.get(attempt)
        if found is None or found.state == "pending":
            return None
        self._drop(found)
        return found

    def get(self, approval_id: str) -> Approval | None:
        self._expire()
        return self._by_id.get(approval_id)

    def decide(self, approval_id: str, approve: bool, by: str) -> Approval:
        """Approve or deny a waiting call; it stays usable until it expires (the same deadline)."""
        self._expire()
        found = self._by_id.get(approval_id)
        if found is None or found.state != "pending":
            raise ApprovalUnknown(approval_id)
        found.state = "approved" if approve else "denied"
        found.decided_by = by
        found.decided_ms = self.now_ms()
        return found

    def listed(self) -> list[dict[str, Any]]:
        """Oldest first (in the order they were made), each with `expires_in_ms`, the time it has left."""
        self._expire()
        now = self.monotonic()
        return [
            {**approval.to_json(), "expires_in_ms": max(0, int((approval.deadline_s - now) * 1000))}
            for approval in self._by_id.values()
        ]

    def __len__(self) -> int:
        return len(self._by_id)

    def put_back(self, approval: Approval) -> None:
        """An approval `take` gave out for an attempt that was never decided on record (the audit trail
        could not take it): usable again until its deadline, unless another call waits on the attempt."""
        self._expire()
        if approval.deadline_s > self.monotonic() and approval.attempt not in self._by_attempt:
            self._by_id[approval.id] = approval
            self._by_attempt[approval.attempt] = approval

    def _of(self, caller: str) -> list[Approval]:
        return [approval for approval in self._by_id.values() if approval.caller == caller]

    def _make_room(self, caller: str) -> None:
        """At a bound, the oldest denied call (the caller's own, at its bound) gives way: a denial is kept only
        to answer the call's retry, so denying a flood frees the room it took (that retry then asks again)."""
        if len(self._of(caller)) >= self.per_caller:
            self._drop_oldest_denied(self._of(caller))
        if len(self._by_id) >= self.limit:
            self._drop_oldest_denied(list(self._by_id.values()))

    def _drop_oldest_denied(self, approvals: list[Approval]) -> None:
        denied = next((approval for approval in approvals if approval.state == "denied"), None)
        if denied is not None:
            self._drop(denied)

    def _drop(self, approval: Approval) -> None:
        self._by_id.pop(approval.id, None)
        if self._by_attempt.get(approval.attempt) is approval:
            del self._by_attempt[approval.attempt]

    def _expire(self) -> None:
        now = self.monotonic()
        for approval in [a for a in self._by_id.values() if a.deadline_s <= now]:
            self._drop(approval)
