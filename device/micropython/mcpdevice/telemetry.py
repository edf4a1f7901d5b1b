"""A board's telemetry: events and samples in a bounded queue, sent as mcp-broker's `broker/telemetry`."""

# The wire is mcp-broker's versioned envelope (docs/telemetry.md "Provider telemetry"), one JSON-RPC
# notification per record:
#     an event   {"jsonrpc":"2.0","method":"broker/telemetry","params":{"version":1,"signal":"logs",
#                 "events":[{"name":..,"severity":..,"timeUnixNano":"..","attributes":{..},"body":..,
#                 "traceId":..,"spanId":..}]}}
#     a sample   {... "signal":"metrics","metrics":[{"name":..,"kind":"gauge","value":..,
#                 "timeUnixNano":"..","attributes":{..}}, ...]}
# Times are Unix nanoseconds as decimal strings; attributes hold strings, numbers and booleans only
# (the callers leave nulls and objects out).
#
# Trace context: the dispatcher tells .serving() the _meta of each tools/call while its tool runs.
# When _meta.traceparent is the strict W3C version-00 form (00-<32 hex>-<16 hex>-<2 hex>, lowercase,
# neither id all zeros), an event emitted meanwhile carries the caller's trace: traceId is the
# traceparent's trace id and spanId its parent id (the gateway's relay span), so the event sits
# under the call that caused it. Events of the board's own (a ramp that ends, a fault the tick
# finds) and samples carry none.
#
# The queue holds `queue_size` records (a frame is built only when it is sent); when it is full the
# oldest record goes and .dropped counts it. event() and sample() never wait and do no I/O.
# report() is the link loop's second task (mcpdevice.provider): at most one notification every
# `interval_ms`, sent as a list of parts (no frame-sized block needed), so an answer waits at most
# for the one telemetry frame being written; a link that is down or slow leaves the records queued.
#
# Heap: a board compiles this module once the boot-only modules are gone (main.py), so it is kept
# to one small module, and nothing of a sent frame stays referenced while the task sleeps.
#
# API
# ---
# Telemetry(queue_size=8, sample_s=10, interval_ms=100)
#     .serving(meta)          a request's _meta while its tool runs, None after; .context is then the
#                             valid traceparent or None
#     .event(name, attributes, severity=b"info", body=None)   queue one event; name and severity:
#                             bytes (b"pump.state_change", b"error"); body: None or text
#     .sample(prefix, fields)   queue one sample of a dict of fields (e.g. a status object): each
#                             number becomes a gauge named prefix + field (prefix bytes, b"pump."),
#                             the strings and booleans the attributes of every gauge, None is left out
#     await .report(transport)   send the queue on a link until cancelled or the link fails
#     .frame(record) -> list of bytes   one record as the parts of one notification (for a CPython
#                             caller such as the simulator: b"".join(parts))
#     .queue                  the records waiting, oldest first
#     .size .dropped .sample_ms .interval_s   the bound, the records dropped (queue full, no heap to
#                             build one, or its send failed), the sample period (0: none), the pace

import asyncio
import gc
import json
import time

# Ports whose epoch is 2000-01-01 (an ESP32) count from there; the wire counts from 1970.
_EPOCH_NS = 946684800000000000 if time.gmtime(0)[0] == 2000 else 0
_HEAD = b'{"jsonrpc":"2.0","method":"broker/telemetry","params":{"version":1,"signal":"'


class Telemetry:
    def __init__(self, queue_size=8, sample_s=10, interval_ms=100):
        self.queue = []
        self.size = queue_size
        self.dropped = 0
        self.sample_ms = int(sample_s * 1000)
        self.interval_s = interval_ms / 1000
        self.context = None

    def serving(self, meta):
        value = meta.get("traceparent") if type(meta) is dict else None
        self.context = None
        if type(value) is not str or len(value) != 55 or value[:3] != "00-":
            return
        for at in range(3, 55):
            if value[at] not in ("-" if at in (35, 52) else "0123456789abcdef"):
                return
        if value[3:35].strip("0") and value[36:52].strip("0"):
            self.context = value

    def event(self, name, attributes, severity=b"info", body=None):
        self._queue((name, time.time_ns() + _EPOCH_NS, attributes, severity, body, self.context))

    def sample(self, prefix, fields):
        self._queue((prefix, time.time_ns() + _EPOCH_NS, fields))

    def _queue(self, record):
        queue = self.queue
        queue.append(record)
        if len(queue) > self.size:
            queue.pop(0)  # the oldest goes
            self.dropped += 1

    def frame(self, record):
        at = b"%d" % record[1]
        if len(record) == 3:  # a sample: a gauge per number, the rest their attributes
            prefix, _, fields = record
            attributes = {}
            points = []
            for key, value in fields.items():
                if type(value) in (int, float):
                    points.append(key)
                elif value is not None:
                    attributes[key] = value
            attributes = json.dumps(attributes).encode()
            parts = [_HEAD, b'metrics","metrics":[']
            for key in points:
                parts.append(
                    b'{"name":"%s%s","kind":"gauge","value":%s,"timeUnixNano":"%s","attributes":'
                    % (prefix, key.encode(), json.dumps(fields[key]).encode(), at)
                )
                parts.append(attributes)
                parts.append(b"},")
            parts[-1] = b"}]}}"
            return parts
        name, _, attributes, severity, body, context = record
        parts = [
            _HEAD,
            b'logs","events":[{"name":"%s","severity":"%s","timeUnixNano":"%s","attributes":' % (name, severity, at),
            json.dumps(attributes).encode(),
        ]
        if body is not None:
            parts.append(b',"body":' + json.dumps(body).encode())
        if context is not None:
            parts.append(b',"traceId":"%s","spanId":"%s"' % (context[3:35].encode(), context[36:52].encode()))
        parts.append(b"}]}}")
        return parts

    async def report(self, transport):
        while True:
            await asyncio.sleep(self.interval_s)
            if not self.queue:
                continue
            record = self.queue.pop(0)
            try:
                parts = self.frame(record)
            except MemoryError:
                self.dropped += 1
                continue
            record = None
            try:
                await transport.send(parts)
            except Exception:  # the link failed; the link loop finds out on its own
                self.dropped += 1
                return
            parts = None  # nothing of it stays on the heap while the task sleeps
            gc.collect()  # nor its garbage, between the blocks the answers take
