"""The provider link loop: connect, register, serve frames, and come back after every loss."""

# Transport-independent: it takes a factory of transports with the interface described in
# mcpdevice.websocket (connect, recv, send, close, describe; LinkClosed below when the peer closes),
# so serial and MQTT transports plug in unchanged. A transport whose connect() returns true (the
# WebSocket) makes each link a new gateway session, and the dispatcher's repeat cache is emptied
# (Dispatcher.new_link); serial and MQTT links keep it, so a redelivery after any reconnect or
# `initialize` is still answered from it.
# One request and one response are in memory at a time; the dispatcher answers synchronously.
#
# Liveness: every frame from the gateway, pings included, counts as contact (and is passed on to
# `on_heard`, which feeds the pump's dead-man). A link silent for `silence_s` is dropped and dialled
# again, because a gateway that pings every 30 s is gone when nothing came for 90 s. Reconnects wait
# an exponential back-off with equal jitter: the ceiling starts at `backoff_min_s` and doubles per
# failed dial up to `backoff_max_s`, the wait is picked between half the ceiling and the ceiling, and
# the ceiling resets once a link carried traffic and stayed up `backoff_max_s`, so that a plant full of
# boards does not hammer a restarting gateway in step (and no board redials at once). The gateway
# speaks at every attach, and an MQTT broker lets a second board with the same client id push the
# first off; the board pushed off redials within `backoff_max_s`, so a link lost sooner is a failed
# dial and two such boards both climb to the longest waits instead of redialling every second. The
# C board has the same rule on MQTT (mcpb_mqtt.c); here it holds on every way, the form that costs
# the boot's heap least. A refusal at the door (Refused: an HTTP 4xx on the upgrade; or a close 1008
# before the gateway sent any message, e.g. "Slot already held by a live provider" or a bad slot name;
# on a serial line the gateway's error with id null before it sent any message, LinkClosed with code
# 0) will not change in a second: it puts the ceiling at `backoff_max_s` at once (15 to 30 s with the
# defaults), as the C board (mcpb_backoff_refused) and the simulator do, and it stays there until a
# link carries traffic and stays up that long. Its `link_down` line says
# refused=True; ordinary losses have no such field.
#
# API
# ---
# register_frame(hello, aggregate=True, slot=None) -> bytes    the first frame; links without a URL (serial,
#                                                   MQTT) name their slot in it (docs/protocol.md
#                                                   "Registration", "Hello")
# factory(cls, *args) -> function() -> cls(*args)    a make_transport for Provider
# Provider(dispatcher, make_transport, first_frame, silence_s=90, backoff_min_s=1, backoff_max_s=30,
#          on_heard=None, before_connect=None, log=None, telemetry=None)
#     make_transport   function() -> a new, unconnected transport
#     before_connect   optional coroutine function run before each dial (e.g. bring Wi-Fi up)
#     telemetry        optional mcpdevice.telemetry.Telemetry: on every link, after the register
#                      frame, a second task sends its queue (Telemetry.report) until the link ends
#     await .run()     forever
#     .links           links made so far; .connected: a link is up now
#     .transport       the transport of the link up now, or None; the app calls its optional
#                      .shutdown() (synchronous) on its way out
#     await .notify(method, params=None) -> bool   one JSON-RPC notification of the device's own
#                      (e.g. notifications/resources/updated) on the link up now, in the transport's
#                      framing; False when no link is up or the send failed (the link loop then
#                      finds out on its own), so nothing is queued for a later link

import asyncio
import json
import os

from mcpdevice.clock import ticks_diff, ticks_ms


class LinkClosed(Exception):
    """Raised by a transport when the peer closes the link; args: (close code, reason). Code 0: a
    link without close codes (serial) ended by the gateway's error with id null, named in reason."""


class Refused(OSError):
    """Raised by a transport when the gateway refuses the link before it opens (an HTTP 4xx on the
    WebSocket upgrade); args: (message,), the words a plain OSError would carry ("HTTP 401 from ...")."""


def register_frame(hello, aggregate=True, slot=None):
    params = {"hello": hello}
    if slot is not None:
        params["slot"] = slot
    if aggregate:
        params["aggregate"] = True
    frame = {"jsonrpc": "2.0", "method": "notifications/register", "params": params}
    return json.dumps(frame, separators=(",", ":")).encode()


def factory(cls, *args):
    # Made here, not by the boot code that composes the app: a closure keeps its module's globals,
    # and with them all of that module's code, alive; pump1.build is unloaded after boot.
    return lambda: cls(*args)


def _jitter():
    return int.from_bytes(os.urandom(2), "big") / 65535


class Provider:
    def __init__(
        self,
        dispatcher,
        make_transport,
        first_frame,
        silence_s=90,
        backoff_min_s=1,
        backoff_max_s=30,
        on_heard=None,
        before_connect=None,
        log=None,
        telemetry=None,
    ):
        self.dispatcher = dispatcher
        self.make_transport = make_transport
        self.first_frame = first_frame
        self.silence_ms = int(silence_s * 1000)
        self.backoff_min_s = backoff_min_s
        self.backoff_max_s = backoff_max_s
        self.on_heard = on_heard
        self.before_connect = before_connect
        self._log = log or (lambda event, **fields: None)
        self.telemetry = telemetry
        self.links = 0
        self.connected = False
        self.transport = None
        self._carried = False

    async def run(self):
        # Locals, not attributes: each attribute or global name a module uses is an entry in its name
        # table while it compiles, and the boot has little heap to spare (tests/device/test_heap_headroom.py).
        failures = 0  # the ceiling's doublings: one per failed dial; a refusal jumps to the most (16)
        failed = 0  # links in a row that carried nothing, for the log
        refusals = 0  # refusals in a row, for the log
        last = ticks_ms()  # when the last link_down line was logged
        while True:
            transport = reporter = None
            refused = False
            self._carried = False
            try:
                if self.before_connect is not None:
                    await self.before_connect()
                transport = self.make_transport()
                self.transport = transport
                if await transport.connect():  # a new gateway session: ids may repeat (WebSocket)
                    self.dispatcher.new_link()
                up = ticks_ms()
                self.links += 1
                self.connected = True
                self._log("link_up", url=transport.describe(), links=self.links)
                await transport.send(self.first_frame)
                if self.telemetry is not None:
                    reporter = asyncio.create_task(self.telemetry.report(transport))
                reason = await self._serve(transport)
            except LinkClosed as exc:
                # Code 0: no close code (a serial line), the reason is the gateway's error with id null.
                reason = "closed, code %d: %s" % exc.args if exc.args[0] else exc.args[1]
                refused = exc.args[0] in (0, 1008) and not self._carried  # before the gateway said anything
            except Exception as exc:  # OSError, EOFError, timeouts, a refused handshake: all mean "dial again"
                text = str(exc)
                refused = isinstance(exc, Refused)
                # A refused upgrade keeps the words it had as a plain OSError: log readers match them.
                name = "OSError" if refused else type(exc).__name__
                reason = "%s: %s" % (name, text) if text else name
            finally:
                self.connected = False
                if reporter is not None:
                    reporter.cancel()
                if transport is not None:
                    await transport.close(1001, "device reconnecting")
                self.transport = None
            if self._carried and ticks_diff(ticks_ms(), up) >= self.backoff_max_s * 1000:
                failures = failed = 0
            if refused:  # at the door: the gateway will say the same for a while
                failures = max(failures, 16)
                refusals += 1
                ceiling = self.backoff_max_s  # even with a minimum too small to double up to it
            else:
                refusals = 0
                ceiling = min(self.backoff_max_s, self.backoff_min_s * (2 ** min(failures, 16)))
            delay = ceiling / 2 + ceiling / 2 * _jitter()
            failures += 1
            failed += 1
            # Every lost link is logged; past the third failed dial (or refusal) in a row, one line per
            # two longest back-offs (60 s with the defaults), so a long outage never looks like a board
            # that gave up. failed_dials says how many dials the run has had.
            count = refusals if refused else failed
            if count <= 3 or ticks_diff(ticks_ms(), last) >= self.backoff_max_s * 2000:
                last = ticks_ms()
                fields = {"refused": True} if refused else {}
                self._log("link_down", reason=reason, retry_in_s=round(delay, 2), failed_dials=failed - 1, **fields)
            await asyncio.sleep(delay)

    async def notify(self, method, params=None):
        if not self.connected:  # .transport is set while connected
            return False
        frame = '{"jsonrpc":"2.0","method":' + json.dumps(method)
        if params is not None:
            frame += ',"params":' + json.dumps(params, separators=(",", ":"))
        try:
            await self.transport.send((frame + "}").encode())
            return True
        except Exception:
            return False

    async def _serve(self, transport):
        """Serve one link until it goes silent (returns why) or fails (raises)."""
        heard = ticks_ms()
        dispatcher = self.dispatcher
        while True:
            remaining_ms = self.silence_ms - ticks_diff(ticks_ms(), heard)
            if remaining_ms <= 0:
                return "no frame or ping from the gateway for %d s" % (self.silence_ms // 1000)
            try:
                message = await asyncio.wait_for(transport.recv(), remaining_ms / 1000)
            except asyncio.TimeoutError:
                continue
            heard = ticks_ms()
            if self.on_heard is not None:
                self.on_heard()
            if message is None:
                continue
            self._carried = True
            if isinstance(message, tuple):  # (size, first bytes) of a message over the frame cap
                answer = dispatcher.oversize(message[0], message[1])
            else:
                answer = dispatcher.handle(message)
            message = None
            if answer is not None:
                await transport.send(answer)
