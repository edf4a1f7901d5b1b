"""The numbers in the ids the gateway gives its requests to providers (docs/protocol.md, "Requests and ids").

A link that nothing sent before it can reach (a stdio child, a remote upstream, an in-process
server) numbers its requests from 1. A link that an answer owed to an earlier session may reach takes
its numbers from one sequence shared by every such link of the process, started at a random point
once per process: a medium that outlives its session (an MQTT topic, a serial line) and a provider
that dials again by itself (a WebSocket client, whose library may flush an answer it owed the earlier
connection onto the new one). A late answer to a request of an earlier session (of this gateway, or
of the one before a restart) then names no request of the new session.
"""

from __future__ import annotations

import secrets

ID_CEILING = 2**31
"""Every number stays below this: a C board holds a request id in a signed 32-bit integer."""


class RequestNumbers:
    """Request numbers from `start` upwards, wrapping from ID_CEILING - 1 back to 1."""

    def __init__(self, start: int = 1) -> None:
        if not 1 <= start < ID_CEILING:
            raise ValueError(f"a request number is from 1 to {ID_CEILING - 1}, not {start}")
        self._start = start
        self._next = start
        self._taken = 0
        """How many numbers `take` returned, at most every number there is."""

    @property
    def upcoming(self) -> int:
        """The number `take` returns next."""
        return self._next

    def take(self) -> int:
        number = self._next
        self._next = number + 1 if number + 1 < ID_CEILING else 1
        self._taken = min(self._taken + 1, ID_CEILING - 1)
        return number

    def taken(self, number: int) -> bool:
        """Did `take` ever return `number`? An answer under a number this process never gave out was
        asked by someone else on the same medium (docs/operations.md, "Diagnosis")."""
        if not 1 <= number < ID_CEILING:
            return False
        return (number - self._start) % (ID_CEILING - 1) < self._taken


def random_start() -> int:
    """A start from 1 to ID_CEILING - 1, unpredictable from one process to the next."""
    return 1 + secrets.randbelow(ID_CEILING - 1)


LINGERING_MEDIA = RequestNumbers(random_start())
"""The one sequence of every link a late answer may reach (LinkInfo.medium_outlives_session or
peer_outlives_link)."""


def numbers_for(late_answers_may_arrive: bool) -> RequestNumbers:
    """The sequence a new provider session numbers its requests from."""
    return LINGERING_MEDIA if late_answers_may_arrive else RequestNumbers()
