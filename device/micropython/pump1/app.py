"""The running pump-1 app: the control tick and the gateway link, until the process ends.

API: run(parts, tick_ms=100, heap_log_s=0)   parts: pump1.build.build(settings); the motor is
     stopped on every way out, and a transport with a `shutdown()` (MQTT: clear the retained
     status) is closed on it.
     Dial(log, station=None)   the provider's before_connect: `await .prepare()` brings Wi-Fi up
     (station: (ensure_station, ssid, password)) and feeds `.watchdog` (set once armed).
Both stay loaded while the app runs, so that nothing of the boot-only pump1.build is kept with them.
"""

import asyncio
import gc

from mcpdevice.log import log


async def _tick(controller, watchdog, tick_ms, heap_log_ms):
    since_heap_log = 0
    while True:
        controller.tick()
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
    def __init__(self, log, station=None):
        self.log = log
        self.station = station
        self.watchdog = None  # armed last at boot

    async def prepare(self):
        if self.station is not None:
            ensure_station, ssid, password = self.station
            await ensure_station(ssid, password, log=self.log)
        if self.watchdog is not None:
            # The dial's name lookup (getaddrinfo in asyncio.open_connection, which every transport
            # dials with) blocks the whole event loop, the tick that feeds the watchdog too: give it
            # all of watchdog_s.
            self.watchdog.feed()


async def _main(controller, provider, watchdog, tick_ms, heap_log_ms):
    asyncio.create_task(_tick(controller, watchdog, tick_ms, heap_log_ms))
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
