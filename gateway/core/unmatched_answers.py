"""Answers a provider sends under an id no request waits for (late, duplicate, or of the wrong type):
counted, warned about once per connection, and named in the deadline error of a request that was
pending meanwhile, since one of them may have been its answer under another id (docs/protocol.md,
"Requests and ids").

On a medium that outlives a session (an MQTT topic, a serial line) an answer under an id of the
gateway's own form whose number this process never gave out was asked by someone else on the same
medium: another gateway (a spare with this one's broker login) or a second program on the line. Those
are counted apart (`foreign_answers`), as the board is not at fault (docs/operations.md, "Diagnosis")."""

from __future__ import annotations

import re
from typing import Any, Protocol

from gateway.core import errors
from gateway.core.link import ProviderLink
from gateway.core.provider_state import Pending, SessionCounters, SessionSettings
from gateway.core.request_ids import ID_CEILING, LINGERING_MEDIA

_GATEWAY_FORM = re.compile(r"brk-([1-9][0-9]{0,9})")
"""The string ids the gateway gives its requests (gateway/core/provider_session.py, `_new_id`)."""


class AnsweredSession(Protocol):
    """What this needs of a provider session (gateway/core/provider_session.py)."""

    last_unmatched_id: str

    @property
    def slot(self) -> str: ...

    @property
    def counters(self) -> SessionCounters: ...

    @property
    def settings(self) -> SessionSettings: ...

    @property
    def link(self) -> ProviderLink: ...

    @property
    def numeric_ids(self) -> bool: ...

    def warn_once(self, kind: str, text: str, *args: Any) -> None: ...


def _gateway_number(session: AnsweredSession, request_id: Any) -> int | None:
    """The number in `request_id` when it has the form of the ids this session sends, else None."""
    number = None
    if isinstance(request_id, str):
        found = _GATEWAY_FORM.fullmatch(request_id)
        number = int(found.group(1)) if found else None
    elif session.numeric_ids and isinstance(request_id, int) and not isinstance(request_id, bool):
        number = request_id
    return number if number is not None and 1 <= number < ID_CEILING else None


def foreign(session: AnsweredSession, request_id: Any) -> bool:
    """Is `request_id` an id of the gateway's own form that this process never sent on a medium that
    outlives its session (so someone else asked the board)?"""
    if not session.link.info.medium_outlives_session:
        return False  # a connection of its own (a WebSocket, a child): nobody else can ask on it
    number = _gateway_number(session, request_id)
    return number is not None and not LINGERING_MEDIA.taken(number)


def unmatched_answer(session: AnsweredSession, request_id: Any) -> None:
    """The provider answered `request_id`, which no request waits for: count it, remember its id."""
    if foreign(session, request_id):
        session.counters.foreign_answers += 1
        session.warn_once(
            "foreign",
            "provider for slot %s answered id %r that this gateway never sent: another gateway or program "
            "talks to the same board (docs/operations.md, Diagnosis)",
            session.slot,
            request_id,
        )
        return
    session.counters.unmatched_responses += 1
    session.last_unmatched_id = errors.shown_id(request_id)
    session.warn_once(
        "unmatched",
        "provider for slot %s answered id %r that nobody waits for (late, duplicate, or wrong id type)",
        session.slot,
        request_id,
    )


def deadline_error(session: AnsweredSession, entry: Pending, asked_client: str | None = None) -> errors.RpcError:
    """The error of `entry`, whose deadline passed: when the provider was waiting for the client's
    answer to a request relayed to it (`asked_client`, its method), the client's silence; else the
    provider's, naming the answers nobody waited for that it sent while `entry` was pending."""
    if asked_client is not None:
        return errors.client_deadline(session.slot, entry.timeout_ms, session.settings.setting_for(entry), asked_client)
    return errors.deadline(
        session.slot,
        entry.timeout_ms,
        session.settings.setting_for(entry),
        request_id=entry.request_id,
        unmatched=session.counters.unmatched_responses - entry.unmatched_before,
        last_unmatched_id=session.last_unmatched_id,
    )
