"""The running pump-1 app: the control tick and the gateway link, until the process ends.

API: run(parts, settings)   parts: pump1.build.build(settings); the motor is stopped on every way out,
and a transport with a `shutdown()` (MQTT: clear the retained status) is closed on it.
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


async def _main(controller, provider, watchdog, settings):
    asyncio.create_task(_tick(controller, watchdog, settings["tick_ms"], int(settings["heap_log_s"] * 1000)))
    await provider.run()


def run(parts, settings):
    hardware, controller, provider, watchdog = parts
    try:
        asyncio.run(_main(controller, provider, watchdog, settings))
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
