"""A real `mcp-gateway run` process under a stand-in for systemd: NOTIFY_SOCKET is a datagram socket the
test binds, WATCHDOG_USEC a short watchdog. The gateway says READY=1 once it answers and its upstreams made
their first attempt, STATUS= as slots come, WATCHDOG=1 from its event loop, RELOADING=1 and READY=1
around SIGHUP, STOPPING=1 at SIGTERM; stopped, it sends no WATCHDOG=1."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
import time
from collections.abc import AsyncIterator

import aiohttp

from bench.ports import free_port
from gateway.app import GatewayServer
from gateway.publish import Publisher
from gateway.service import Notifier, SystemdService
from tests.support.gateway_process import GatewayProcess, run_cli, spawn
from tests.support.servers import demo_server
from tests.support.southbound import provider_status
from tests.support.systemd import Message, NotifySocket

WATCHDOG_USEC = "400000"  # pings every 0.2 s


def ready(message: Message) -> bool:
    return message.get("READY") == "1"


def watchdog(message: Message) -> bool:
    return message.get("WATCHDOG") == "1"


def under_systemd(notify: NotifySocket) -> dict[str, str]:
    # WATCHDOG_PID and JOURNAL_STREAM emptied: the test runner's own, if it runs under systemd, are not the child's.
    return {"NOTIFY_SOCKET": notify.path, "WATCHDOG_USEC": WATCHDOG_USEC, "WATCHDOG_PID": "", "JOURNAL_STREAM": ""}


@contextlib.asynccontextmanager
async def gateway_under(notify: NotifySocket, *args: str) -> AsyncIterator[GatewayProcess]:
    gateway = await spawn("--port", str(free_port()), *args, env=under_systemd(notify))
    try:
        yield gateway
    finally:
        await gateway.stop()


async def test_ready_status_watchdog_reload_and_stopping_reach_systemd() -> None:
    nobody = free_port()  # nothing listens there: the remote upstream's first attempt is refused
    with NotifySocket() as notify:
        async with gateway_under(notify, "--remote", f"dead=http://127.0.0.1:{nobody}/mcp") as gateway:
            first = await notify.until(ready, what="READY=1")
            assert first["STATUS"] == "0 slots connected"
            url = await gateway.started()
            async with aiohttp.ClientSession() as http, http.get(f"{url}/readyz") as answer:
                assert answer.status == 200  # the listener was up before READY=1
            # ... and the upstream had finished its first attempt (it keeps naming its failure).
            assert (await provider_status(url, "dead"))["upstream"]["state"] == "unreachable"
            for _ in range(3):
                await notify.until(watchdog, what="WATCHDOG=1")

            publisher = Publisher(demo_server("pump-1"), url, "pump-1")
            publishing = asyncio.create_task(publisher.run())
            try:
                await notify.until(lambda m: m.get("STATUS") == "1 slot connected", what="STATUS= with pump-1")

                before = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
                gateway.process.send_signal(signal.SIGHUP)
                reloading = await notify.until(lambda m: m.get("RELOADING") == "1", what="RELOADING=1")
                assert int(reloading["MONOTONIC_USEC"]) >= before  # systemd's clock, read by the gateway
                assert (await notify.until(ready, what="READY=1 after the reload"))["STATUS"] == "1 slot connected"
                # `mcp-gateway reload` (the _broker tool broker_reload) is announced the same way, once.
                code, _, err = await run_cli("reload", "--url", url)
                assert code == 0, err
                await notify.until(lambda m: m.get("RELOADING") == "1", what="RELOADING=1 for mcp-gateway reload")
                await notify.until(ready, what="READY=1 after mcp-gateway reload")
            finally:
                await publisher.stop()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await asyncio.wait_for(publishing, 5)

            gateway.process.send_signal(signal.SIGTERM)
            await notify.until(lambda m: m.get("STOPPING") == "1", what="STOPPING=1")
            assert await asyncio.wait_for(gateway.process.wait(), 20) == 0


async def test_ready_waits_no_longer_than_ready_wait_s_for_an_upstream() -> None:
    # A child that never answers initialize: its first attempt lasts startup_timeout_s (10 s).
    silent = f"silent={sys.executable} -c 'import time; time.sleep(600)'"
    with NotifySocket() as notify:
        gateway = await spawn(
            "--port",
            str(free_port()),
            "--stdio",
            silent,
            env={**under_systemd(notify), "MCP_GATEWAY_SYSTEMD__READY_WAIT_S": "0.5"},
        )
        try:
            starting = await notify.until(lambda m: "STATUS" in m, what="STATUS= while starting")
            assert starting["STATUS"] == "starting: waiting for 1 of 1 upstreams"
            await notify.until(ready, what="READY=1")
            line = await gateway.wait_line("still in their first attempt")
            assert "stdio silent" in line
        finally:
            await gateway.stop()


async def test_a_stopped_gateway_sends_no_watchdog_until_it_runs_again() -> None:
    with NotifySocket() as notify:
        async with gateway_under(notify) as gateway:
            await notify.until(ready, what="READY=1")
            await notify.until(watchdog, what="WATCHDOG=1")
            gateway.process.send_signal(signal.SIGSTOP)
            try:
                await asyncio.sleep(0.1)  # a datagram sent just before the stop
                notify.drain()
                await asyncio.sleep(1.0)  # five intervals
                assert notify.drain_messages() == []
            finally:
                gateway.process.send_signal(signal.SIGCONT)
            await notify.until(watchdog, what="WATCHDOG=1 after SIGCONT")


def hold_the_loop(seconds: float) -> None:
    """Block the thread that runs the event loop, as a stuck handler would."""
    time.sleep(seconds)


async def test_a_gateway_whose_event_loop_is_blocked_stops_sending_watchdog(gateway: GatewayServer) -> None:
    # The in-process gateway runs on this test's loop: holding the loop holds the gateway.
    with NotifySocket() as notify:
        notifier = Notifier(notify.path)
        service = SystemdService(
            notifier,
            gateway.config.systemd,
            lambda: len(gateway.gateway.registry.connected_names()),
            environ={"WATCHDOG_USEC": WATCHDOG_USEC},
        )
        service.start()
        try:
            await notify.until(watchdog, what="WATCHDOG=1")
            notify.drain()
            hold_the_loop(1.0)  # five intervals
            assert notify.drain_messages() == []
            async with aiohttp.ClientSession() as http, http.get(f"{gateway.url}/healthz") as answer:
                assert answer.status == 200
            await notify.until(watchdog, what="WATCHDOG=1 once the loop turns again")
        finally:
            await service.close()
