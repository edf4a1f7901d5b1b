"""Requests a provider sends towards a client (sampling, elicitation, roots): each is attributed to
the client request it belongs to, relayed to that client, and answered under the provider's own id.

A provider's ping is answered here too, and its `broker/*` requests go to the provider broker
(gateway/core/provider_broker.py); any other method is refused. A relayed request ends with the
client request it belongs to, and the provider hears why at once (docs/protocol-clients.md).

The gateway's answers to one provider wait for its link (a serial port's single writer, a WebSocket
the provider stopped reading): while limits.max_pending_per_slot of them wait, a new request from the
provider is dropped unanswered and counted (mcpgw_limit_hits_total{limit="max_pending_per_slot"}, and
the link's own drop counter where it has one: a serial port's `backlog`), so a provider that sends
faster than it reads cannot grow the gateway's memory without bound.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Mapping
from typing import Any, Protocol

from gateway.core import errors, jsonrpc
from gateway.core.jsonrpc import JsonId, JsonObject
from gateway.core.link import ProviderLink
from gateway.core.provider_broker import BROKER_PREFIX, DECLARE, ProviderBroker, strip_caller
from gateway.core.provider_state import Pending, Relayed, SessionCounters, SessionSettings, is_gateway_id
from gateway.core.relay import (
    RELATED_REQUEST_KEY,
    RELAYED_METHODS,
    CallRefused,
    RelayMetrics,
    RequestRelay,
    outcome_of,
    refusal,
)
from gateway.core.request_notices import GivenUpRequests, client_of

log = logging.getLogger("gateway.provider")

ANSWERS_LIMIT = "max_pending_per_slot"
"""The bound of the answers waiting per provider: its key under [limits] (mcpgw_limit_hits_total)."""
DROP_WARN_INTERVAL_S = 60.0
"""At most one warning per provider in this long about requests dropped for answers waiting (one per
burst, a burst ending once every answer was written); the rest are counted and logged at debug."""


class RelayingSession(Protocol):
    """What the relay needs of its provider session (gateway/core/provider_session.py)."""

    @property
    def slot(self) -> str: ...

    @property
    def link(self) -> ProviderLink: ...

    @property
    def state(self) -> str: ...

    @property
    def pending(self) -> Mapping[JsonId, Pending]: ...

    @property
    def counters(self) -> SessionCounters: ...

    @property
    def settings(self) -> SessionSettings: ...

    @property
    def given_up(self) -> GivenUpRequests: ...

    async def send_message(self, message: JsonObject) -> None: ...

    def fail_request(self, owner: Pending, error: errors.RpcError) -> None:
        """End the client request `owner` with `error` now; its provider call is cancelled upstream."""
        ...


class ProviderRequests:
    """One provider session's requests towards clients, from arrival to answer."""

    def __init__(self, session: RelayingSession) -> None:
        self.session = session
        self.relayed: dict[JsonId, Relayed] = {}
        self.metrics: RelayMetrics | None = None
        """Set by the slot registry: counts relayed requests (mcpgw_relay_requests, mcpgw_relay_in_flight)."""
        self._answers: set[asyncio.Task[None]] = set()
        self.broker: ProviderBroker | None = None
        """Set by the slot registry: answers the provider's broker/* requests (None: -32601)."""
        self.declared = False
        """A declaration of this link was accepted: requests forwarded to it carry a caller reference."""
        self._broker_requests: dict[JsonId, asyncio.Task[None]] = {}
        self.dropped = 0
        """Requests of the provider dropped unanswered while limits.max_pending_per_slot answers waited."""
        self._burst_dropped = 0
        """Of those, dropped since the answers last all left (0: no burst going on)."""
        self._warned_at: float | None = None
        self._burst_warned = False

    def end_relays(self, owner: Pending, why: str) -> None:
        """The client request `owner` ended: its relayed requests end too, and the provider gets `why`
        for each at once (before the cancel of the request they belong to, which goes out next)."""
        if not self.relayed:
            return
        for request_id, record in self.relayed.items():
            if record.owner is owner and not record.task.done():
                record.ended = "client_gone" if why == "client disconnected" else "ended"
                record.task.cancel()
                if self.session.state != "closed":
                    reply = jsonrpc.error_response(request_id, jsonrpc.UNAVAILABLE, why, {"reason": record.ended})
                    self._start_answer(reply)  # bounded already: one per request being relayed

    def cancel_all(self) -> None:
        """The link is gone: nobody is left to answer."""
        for record in self.relayed.values():
            record.task.cancel()
        for task in self._broker_requests.values():
            task.cancel()
        if self.broker is not None:
            self.broker.gone(self.session)

    def on_request(self, body: JsonObject) -> None:
        """A request from the provider: ping is answered here, a request towards a client is relayed to
        the client request it belongs to, anything else is refused under the provider's id."""
        method = body["method"]
        request_id = body["id"]
        if self._answers_full():
            self._drop(method)
            return
        if method == "ping":
            reply = jsonrpc.result_response(request_id, {})
        elif method.startswith(BROKER_PREFIX):
            answer = self._broker_request(request_id, method, body.get("params"))
            if answer is None:
                return
            reply = answer
        elif method not in RELAYED_METHODS:
            reply = jsonrpc.error_response(
                request_id,
                jsonrpc.METHOD_NOT_FOUND,
                f"Method not found: the gateway does not relay {method} from providers",
            )
        elif request_id in self.relayed:
            self.session.counters.protocol_violations += 1
            reply = jsonrpc.error_response(
                request_id,
                jsonrpc.INVALID_REQUEST,
                f"Request id {request_id!r} is already in use by a request of yours the gateway is relaying",
            )
        else:
            params = body.get("params")
            params = params if isinstance(params, dict) else None
            owner = self.attribute(method, params)
            if isinstance(owner, errors.RpcError):
                self._count_relay(method, outcome_of(owner))
                reply = owner.response(request_id)
            else:
                assert owner.relay is not None
                task = asyncio.get_running_loop().create_task(
                    self._relay(request_id, owner.relay, method, params), name=f"relay {method} for {self.session.slot}"
                )
                self.relayed[request_id] = Relayed(task, owner)
                return
        self.answer(reply, method)

    def _broker_request(self, request_id: JsonId, method: str, params: Any) -> JsonObject | None:
        """The answer to a `broker/*` request now (a refusal), or None while the policy layer works it out."""
        broker = self.broker
        if broker is None:
            return errors.method_not_found(method, "this gateway").response(request_id)
        refused = broker.refusal(self.session, method)
        if refused is not None:
            return refused.response(request_id)
        if request_id in self._broker_requests:
            self.session.counters.protocol_violations += 1
            return jsonrpc.error_response(
                request_id,
                jsonrpc.INVALID_REQUEST,
                f"Request id {request_id!r} is already in use by a broker/* request",
            )
        if len(self._broker_requests) >= broker.max_pending:
            return errors.too_many_pending(
                f'broker/* requests of slot "{self.session.slot}"', broker.max_pending
            ).response(request_id)
        task = asyncio.get_running_loop().create_task(
            self._serve_broker(broker, request_id, method, params if isinstance(params, dict) else None),
            name=f"{method} for {self.session.slot}",
        )
        self._broker_requests[request_id] = task
        return None

    async def _serve_broker(
        self, broker: ProviderBroker, request_id: JsonId, method: str, params: JsonObject | None
    ) -> None:
        try:
            result = await broker.request(self.session, method, params)
            reply = jsonrpc.result_response(request_id, result)
            if method == DECLARE:
                self.declared = True
        except errors.RpcError as exc:
            reply = exc.response(request_id)
        except asyncio.CancelledError:
            return  # the link is gone: nobody is left to answer
        except Exception:  # a fault of the gateway's: the provider still gets an answer, not silence
            log.exception(
                "answering %s from slot %s failed", method, self.session.slot, extra={"slot": self.session.slot}
            )
            reply = jsonrpc.error_response(
                request_id, jsonrpc.INTERNAL_ERROR, f"The gateway failed to answer {method}; its log says why"
            )
        finally:
            self._broker_requests.pop(request_id, None)
        if self.session.state != "closed":
            await self._reply(reply)

    def broker_notification(self, method: str, params: JsonObject) -> None:
        """A `broker/*` notification (an audit result, telemetry): to the provider broker, else dropped."""
        if self.broker is not None:
            self.broker.notification(self.session, method, params)

    def refuse_batch(self) -> None:
        """A batch from the provider: nothing in it is read (a request in it is never served), so the
        provider is told at once instead of waiting for answers; one error per batch, under id null."""
        if self.session.state != "closed":
            message = "JSON-RPC batches are not supported: nothing in this batch was read; send one message at a time"
            self.answer(jsonrpc.error_response(None, jsonrpc.INVALID_REQUEST, message, {"reason": "batch"}), "a batch")

    def refuse_too_deep(self, message: jsonrpc.Message) -> None:
        """A request nested deeper than limits.max_json_depth whose id and method were still read: answered
        -32600 under its id at once, as a client's is, rather than left to the provider's own deadline."""
        if not message.limit or self.session.state == "closed":
            return
        if not isinstance(message.body, dict) or "id" not in message.body or not message.method:
            return  # an answer (refused_answers ends its caller's wait) or no id to answer under
        self.answer(
            jsonrpc.error_response(
                message.id, jsonrpc.INVALID_REQUEST, f"Invalid JSON-RPC: {message.problem}", {"limit": message.limit}
            ),
            f"{message.method} nested deeper than limits.max_json_depth",
        )

    def answer(self, reply: JsonObject, what: str) -> None:
        """Send an answer to `what` the provider sent (its method, or what was wrong with it) without
        waiting for the send; dropped (and counted) while limits.max_pending_per_slot answers wait for
        the link already."""
        if self._answers_full():
            self._drop(what)
            return
        self._start_answer(reply)

    def _start_answer(self, reply: JsonObject) -> None:
        task = asyncio.get_running_loop().create_task(self._reply(reply))
        self._answers.add(task)
        task.add_done_callback(self._answer_done)

    def _answer_done(self, task: asyncio.Task[None]) -> None:
        self._answers.discard(task)
        if self._burst_dropped and not self._answers:
            log.log(
                logging.INFO if self._burst_warned else logging.DEBUG,
                "slot %s: its answers are written again; %d of its requests were dropped meanwhile",
                self.session.slot,
                self._burst_dropped,
                extra={"slot": self.session.slot},
            )
            self._burst_dropped = 0
            self._burst_warned = False

    def _answers_full(self) -> bool:
        return len(self._answers) >= self.session.settings.max_pending

    def _drop(self, what: str) -> None:
        """A request of the provider dropped unanswered: the answers before it still wait for the link."""
        self.dropped += 1
        self._burst_dropped += 1
        if self.metrics is not None:
            self.metrics.metrics.limit_hit(ANSWERS_LIMIT)
        self.session.link.request_dropped()
        slot = self.session.slot
        now = time.monotonic()
        if self._burst_dropped == 1 and (self._warned_at is None or now - self._warned_at >= DROP_WARN_INTERVAL_S):
            self._warned_at = now
            self._burst_warned = True
            log.warning(
                "slot %s: drops the provider's requests unanswered (the first: %s) while %d answers to it wait "
                "for its link (limits.max_pending_per_slot): it sends requests faster than it reads the answers",
                slot,
                what,
                len(self._answers),
                extra={"slot": slot, "fault": "answers_waiting"},
            )
        else:
            log.debug("slot %s: dropped a request (%d answers wait)", slot, len(self._answers), extra={"slot": slot})

    def attribute(self, method: str, params: JsonObject | None) -> Pending | errors.RpcError:
        """The client request a provider request belongs to (docs/protocol-clients.md, "Attribution"): the
        one it names in _meta, else the only client request pending, else the only one whose client is
        waiting; neither of the last two while a call the gateway gave up of another client is held."""
        meta = params.get("_meta") if params is not None else None
        if isinstance(meta, dict) and RELATED_REQUEST_KEY in meta:
            related = meta[RELATED_REQUEST_KEY]
            # A given-up call is no longer pending: a tag naming it is refused like an unknown one.
            entry = self.session.pending.get(related) if is_gateway_id(related) else None
            if entry is None or entry.relay is None:
                return refusal(method, f"the request it names ({related!r}) is not a pending client request", "ended")
            return entry
        clients = [entry for entry in self.session.pending.values() if entry.relay is not None]
        waiting = [entry for entry in clients if entry.relay is not None and entry.relay.waiting]
        owner = clients[0] if len(clients) == 1 else waiting[0] if len(waiting) == 1 else None
        if owner is not None:
            # A call given up (cancelled, its client gone, past its deadline) may still run in the
            # provider and be the one asking, with its caller's data: never another client's to see
            # or answer (MCP: a server's request goes only to the client whose request caused it).
            held = self.session.given_up.clients
            if not held or held.keys() == {client_of(owner)}:
                return owner
            why = (
                "another client's request the gateway gave up (cancelled, its client gone or past its deadline) "
                "may still be running and be the one asking, and the request does not name one "
                f"(_meta {RELATED_REQUEST_KEY!r})"
            )
        elif not clients:
            why = "no client request is pending on this provider"
        else:
            why = (
                f"{len(waiting)} client requests are pending and the request does not name one "
                f"(_meta {RELATED_REQUEST_KEY!r})"
            )
        return refusal(method, why, "unattributed")

    async def _relay(self, request_id: JsonId, relay: RequestRelay, method: str, params: JsonObject | None) -> None:
        """Relay one provider request and send the provider the answer under its own id."""
        metrics = self.metrics
        if metrics is not None:
            metrics.started()
        reply: JsonObject | None = None
        try:
            result = await relay.relay(method, params)
            # A client's answer is a client frame too: it carries no caller reference of its making.
            reply = jsonrpc.result_response(request_id, strip_caller(result) or {})
            outcome = "answered"
        except CallRefused as exc:
            # The caller cannot be asked this, and its era says so by failing its request: the
            # provider is told no (and its call cancelled); the caller gets exc.to_caller.
            reply = exc.response(request_id)
            outcome = outcome_of(exc)
            record = self.relayed.pop(request_id, None)  # first: ending its owner must not end it too
            if record is not None:
                self.session.fail_request(record.owner, exc.to_caller)
        except errors.RpcError as exc:
            reply = exc.response(request_id)
            outcome = outcome_of(exc)
        except asyncio.CancelledError:
            # The provider cancelled it, the link is gone, or the request it belongs to ended (and
            # end_relays answered the provider already).
            record = self.relayed.get(request_id)
            outcome = record.ended if record is not None and record.ended else "cancelled"
        finally:
            self.relayed.pop(request_id, None)
            if metrics is not None:
                metrics.finished()
        self._count_relay(method, outcome)
        if reply is not None and self.session.state != "closed":
            await self._reply(reply)

    def provider_cancelled(self, request_id: Any) -> None:
        record = self.relayed.get(request_id) if is_gateway_id(request_id) else None
        if record is not None:
            record.task.cancel()  # no answer goes back: the provider gave it up

    def _count_relay(self, method: str, outcome: str) -> None:
        if self.metrics is not None:
            self.metrics.counted(method, outcome)

    async def _reply(self, reply: JsonObject) -> None:
        try:
            await self.session.send_message(reply)
        except errors.RpcError as exc:
            # An answer too large for the link: the provider gets the reason under its id instead of
            # waiting for an answer that never comes.
            refused = isinstance(exc.data, dict) and exc.data.get("reason") == "message_refused"
            if refused and "id" in reply and self.session.state != "closed":
                with contextlib.suppress(errors.RpcError):
                    await self.session.send_message(exc.response(reply["id"]))
