"""Answers a provider sends under an id no request waits for (late, duplicate, or of the wrong type):
counted, warned about once per connection, and named in the deadline error of a request that was
pending meanwhile, since one of them may have been its answer under another id (docs/protocol.md,
"Requests and ids")."""

from __future__ import annotations

from typing import Any, Protocol

from gateway.core import errors
from gateway.core.provider_state import Pending, SessionCounters, SessionSettings


class AnsweredSession(Protocol):
    """What this needs of a provider session (gateway/core/provider_session.py)."""

    last_unmatched_id: str

    @property
    def slot(self) -> str: ...

    @property
    def counters(self) -> SessionCounters: ...

    @property
    def settings(self) -> SessionSettings: ...

    def warn_once(self, kind: str, text: str, *args: Any) -> None: ...


def unmatched_answer(session: AnsweredSession, request_id: Any) -> None:
    """The provider answered `request_id`, which no request waits for: count it, remember its id."""
    session.counters.unmatched_responses += 1
    session.last_unmatched_id = errors.shown_id(request_id)
    session.warn_once(
        "unmatched",
        "provider for slot %s answered id %r that nobody waits for (late, duplicate, or wrong id type)",
        session.slot,
        request_id,
    )


def deadline_error(session: AnsweredSession, entry: Pending) -> errors.RpcError:
    """The error of `entry`, whose deadline passed: it names the answers nobody waited for that the
    provider sent while `entry` was pending."""
    return errors.deadline(
        session.slot,
        entry.timeout_ms,
        session.settings.setting_for(entry),
        request_id=entry.request_id,
        unmatched=session.counters.unmatched_responses - entry.unmatched_before,
        last_unmatched_id=session.last_unmatched_id,
    )
