"""The running pump-1 app: the control tick and the gateway link, until the process ends.

API: run(parts, tick_ms=100, heap_log_s=0)   parts: pump1.build.build(settings); the motor is
     stopped on every way out, and a transport with a `shutdown()` (MQTT: clear the retained
     status) is closed on it. The control tick also drives the provider's telemetry (its samples).
     Dial(log, station=None, at_rest=None)   the provider's before_connect: `await .prepare()`
     brings Wi-Fi up (station: (ensure_station, ssid, password)) and feeds `.watchdog` (set once
     armed); `.address(host, port)` is the transports' resolve hook: the address to dial, looked up
     only while `at_rest()` (the motor stands still) or when no earlier lookup gave one.
Both stay loaded while the app runs, so that nothing of the boot-only pump1.build is kept with them.
"""

import asyncio
import gc
import socket

from mcpdevice.log import log


async def _tick(controller, watchdog, tick_ms, heap_log_ms, telemetry):
    since_heap_log = since_sample = 0
    while True:
        controller.tick()
        if telemetry is not None and telemetry.sample_ms:
            since_sample += tick_ms
            if since_sample >= telemetry.sample_ms:
                since_sample = 0
                controller.sample()
        if watchdog is not None:
            watchdog.feed()
        if heap_log_ms:
            since_heap_log += tick_ms
            if since_heap_log >= heap_log_ms:
                since_heap_log = 0
                gc.collect()
                log("heap", free=gc.mem_free(), used=gc.mem_alloc())
        await asyncio.sleep_ms(tick_ms) if hasattr(asyncio, "sleep_ms") else await asyncio.sleep(tick_ms / 1000)


class Dial:
    def __init__(self, log, station=None, at_rest=None):
        self.log = log
        self.station = station
        self.at_rest = at_rest
        self.watchdog = None  # armed last at boot
        self._name = self._address = None  # the last name looked up and the address it gave

    async def prepare(self):
        if self.station is not None:
            ensure_station, ssid, password = self.station
            await ensure_station(ssid, password, log=self.log)
        if self.watchdog is not None:
            # A name lookup of the dial (`address`, with the motor at rest) blocks the whole event
            # loop, the tick that feeds the watchdog too: give it all of watchdog_s.
            self.watchdog.feed()

    def address(self, host, port):
        # A lookup blocks the whole board until the answer or the resolver's own timeout (5 s for a
        # .local name on an ESP32, about 7 s per silent DNS server): no control tick, no fault check.
        # So while the motor turns a dial reuses the address of the last lookup; the dead-man stops
        # the motor if that address no longer answers, and the next dial then looks the name up.
        # Kept small: every byte of code here is heap the TLS handshake of the dial needs.
        if ":" in host or host.replace(".", "").isdigit():
            return host  # an IP address
        kept = self._address if host == self._name else None
        if kept and self.at_rest is not None and not self.at_rest():
            self.log("lookup_skipped", host=host, address=kept)
            return kept
        try:
            found = socket.getaddrinfo(host, port)[0][-1]
        except OSError as exc:
            if not kept:
                raise
            self.log("lookup_failed", host=host, address=kept, error=repr(exc))
            return kept  # the resolver is down, the gateway may well still be where it was
        if not isinstance(found, tuple):  # the Unix port gives the raw sockaddr bytes
            found = socket.sockaddr(found)
            found = (socket.inet_ntop(found[0], found[1]),)
        if found[0] != kept:  # the same address: no new object left between the heap's free blocks
            self._name, self._address = host, found[0]
        self.log("lookup", host=host, address=found[0])
        # The lookup's garbage goes before the TLS handshake needs its larger blocks.
        gc.collect()
        return self._address


async def _main(controller, provider, watchdog, tick_ms, heap_log_ms):
    asyncio.create_task(_tick(controller, watchdog, tick_ms, heap_log_ms, provider.telemetry))
    await provider.run()


def run(parts, tick_ms=100, heap_log_s=0):
    hardware, controller, provider, watchdog = parts
    try:
        asyncio.run(_main(controller, provider, watchdog, tick_ms, int(heap_log_s * 1000)))
    except KeyboardInterrupt:
        log("interrupted")
        if watchdog is not None:
            # The motor is stopped below; keep the REPL usable instead of letting the watchdog reset.
            from machine import Timer

            Timer(0).init(period=1000, callback=lambda _timer: watchdog.feed())
    except Exception as exc:
        # A bug: stop the motor and let it surface; on a board the watchdog then restarts the app.
        log("crashed", error=repr(exc))
        raise
    finally:
        hardware.safe_stop()
        log("motor_stopped", reason="app ended")
        transport = provider.transport
        if transport is not None and hasattr(transport, "shutdown"):
            transport.shutdown()  # now, instead of when the broker's keepalive runs out
            log("link_closed", reason="app ended")
