"""N simulated pump-1 devices: their boards, one control tick, their links, and the control endpoint.

API
---
SimulatorSettings(pumps, first=1, pump=PumpSettings(), tick_ms=100, silence_s=90, backoff_min_s=1,
                  backoff_max_s=30, connect_timeout_s=10)
Simulator(gateway_url or None, settings, security=None, mqtt=None, serial=None, own_gateway=False)
                                         slots pump-<first> ... pump-<first + pumps - 1>;
                                         security: sim.link.LinkSecurity (provider token, TLS trust);
                                         mqtt: sim.mqtt.MqttTarget publishes through an MQTT broker
                                         (plain or mcp profile) instead of a WebSocket to the gateway;
                                         serial: sim.serial_line.SerialTarget puts the pumps on one serial
                                         line (a tty, or a pseudo-terminal made here) instead;
                                         own_gateway: the gateway is this process's (run --sim-pumps), so
                                         its going-away close is not dialled again
    await .start_control(port, flag)     bind the control endpoint on 127.0.0.1 (0: any free port);
                                         raises OSError naming `flag` when the port is taken
    .control_url                         http://127.0.0.1:<port> once bound
    .start(gateway_url=None)             the tick and every pump's link (in the running event loop)
    await .stop()                        links closed (1001), tick and control endpoint stopped
    .apply(slot, fault, clear=False, seconds=None) -> the pump's state; raises UnknownPump, BadFault
    .state(slot) -> dict                 slot, device_id, link, injected conditions, boots, status, the
                                         board's request counts (requests, duplicates, errors) and its
                                         telemetry counts (queued, dropped; null with telemetry off)
run(gateway_url, settings, control_port, security=None) prints where it publishes and its control URL, runs until
                                         SIGTERM or SIGINT (`mcp-gateway sim`); a signal during start-up
                                         stops it cleanly too
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import aiohttp
from aiohttp import web

from gateway import __version__
from gateway.core.names import MAX_SLOT_BYTES
from sim import FIRMWARE_NAME, MAX_OFFLINE_S, SLOT_PREFIX, firmware, max_first
from sim.link import LinkSecurity, PumpLink, RefusalBodies
from sim.mqtt import MqttPumpLink, MqttTarget
from sim.pump import PumpSettings, SimulatedPump
from sim.serial_line import SerialLine, SerialPumpLink, SerialTarget

log = logging.getLogger("sim")

EVENTS = ("reboot", "link_drop")
FAULTS = (*firmware.FAULT_CONDITIONS, *EVENTS)


class UnknownPump(LookupError):
    pass


class BadFault(ValueError):
    pass


@dataclass(frozen=True)
class SimulatorSettings:
    pumps: int
    first: int = 1
    pump: PumpSettings = field(default_factory=PumpSettings)
    tick_ms: int = 100
    silence_s: float = 90.0
    backoff_min_s: float = 1.0
    backoff_max_s: float = 30.0
    connect_timeout_s: float = 10.0

    @property
    def slots(self) -> list[str]:
        return [f"{SLOT_PREFIX}{number}" for number in range(self.first, self.first + self.pumps)]


class Simulator:
    def __init__(
        self,
        gateway_url: str | None,
        settings: SimulatorSettings,
        security: LinkSecurity | None = None,
        mqtt: MqttTarget | None = None,
        serial: SerialTarget | None = None,
        *,
        own_gateway: bool = False,
    ) -> None:
        if settings.pumps < 1:
            raise ValueError("the simulator needs at least one pump")
        if not 0 <= settings.first <= max_first(settings.pumps):
            raise ValueError(
                f"the first pump number must be between 0 and {max_first(settings.pumps)} with {settings.pumps} "
                f"pump(s): every slot name, pump-<n>, fits the gateway's {MAX_SLOT_BYTES} bytes"
            )
        self.gateway_url = gateway_url
        self.settings = settings
        self.security = security or LinkSecurity()
        self.mqtt = mqtt
        self.serial = serial
        self.own_gateway = own_gateway
        self.serial_line: SerialLine | None = None
        path = firmware.schema_file()
        registry = firmware.load_registry(path, settings.pump.frame_max_bytes)
        self.schema_hash = firmware.schema_hash(path)
        pump_settings = settings.pump
        if mqtt is not None and mqtt.profile == "mcp":
            pump_settings = replace(pump_settings, telemetry=False)  # MCP over MQTT has no broker/* way up
        self.pumps = {slot: SimulatedPump(slot, registry, pump_settings) for slot in settings.slots}
        self.links: dict[str, PumpLink | MqttPumpLink | SerialPumpLink] = {}
        self.control_url: str | None = None
        self._http: aiohttp.ClientSession | None = None
        self._tick: asyncio.Task[None] | None = None
        self._control: web.AppRunner | None = None

    def hello(self, pump: SimulatedPump) -> dict[str, Any]:
        return {
            "device_id": pump.device_id,
            "firmware": {"name": FIRMWARE_NAME, "version": __version__},
            "schema": self.schema_hash,
        }

    # -- lifecycle --------------------------------------------------------------------------------

    async def start_control(self, port: int, flag: str = "--control-port") -> str:
        from sim.control import control_app

        runner = web.AppRunner(control_app(self), access_log=None, shutdown_timeout=1.0)
        await runner.setup()
        try:
            site = web.TCPSite(runner, "127.0.0.1", port)
            await site.start()
        except OSError as exc:
            await runner.cleanup()
            raise OSError(
                f"cannot open the simulator's control endpoint on 127.0.0.1:{port}: {exc.strerror or exc}; "
                f"choose another port with {flag} (0 picks a free one)"
            ) from exc
        self._control = runner
        bound = runner.addresses[0][1]
        self.control_url = f"http://127.0.0.1:{bound}"
        return self.control_url

    def start(self, gateway_url: str | None = None) -> None:
        """Start the tick and the links (inside the running loop); `gateway_url` if not given before."""
        self.gateway_url = gateway_url or self.gateway_url
        if self.serial is not None:
            self._start_serial(self.serial)
            return
        if self.mqtt is not None:
            self._start_mqtt(self.mqtt)
            return
        if self.gateway_url is None:
            raise ValueError("the simulator needs the gateway's URL")
        # One connection per pump, however many: no pool limit (aiohttp's default is 100).
        refusals = RefusalBodies()
        self._http = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0), trace_configs=[refusals.trace_config()]
        )
        settings = self.settings
        for slot, pump in self.pumps.items():
            link = PumpLink(
                pump,
                self.gateway_url,
                self._http,
                self.hello(pump),
                silence_s=settings.silence_s,
                connect_timeout_s=settings.connect_timeout_s,
                backoff_min_s=settings.backoff_min_s,
                backoff_max_s=settings.backoff_max_s,
                security=self.security,
                own_gateway=self.own_gateway,
                refusals=refusals,
            )
            self.links[slot] = link
            link.start()
        self._tick = asyncio.get_running_loop().create_task(self._ticker(), name="sim-tick")

    def _start_mqtt(self, target: MqttTarget) -> None:
        settings = self.settings
        for slot, pump in self.pumps.items():
            link = MqttPumpLink(
                pump,
                target,
                self.hello(pump),
                connect_timeout_s=settings.connect_timeout_s,
                backoff_min_s=settings.backoff_min_s,
                backoff_max_s=settings.backoff_max_s,
            )
            self.links[slot] = link
            link.start()
        self._tick = asyncio.get_running_loop().create_task(self._ticker(), name="sim-tick")

    def _start_serial(self, target: SerialTarget) -> None:
        settings = self.settings
        line = SerialLine(
            target,
            self.pumps,
            {slot: self.hello(pump) for slot, pump in self.pumps.items()},
            silence_s=settings.silence_s,
            backoff_min_s=settings.backoff_min_s,
            backoff_max_s=settings.backoff_max_s,
        )
        if target.pty:
            line.open_pty()  # now, so that the path the gateway opens can be shown at once
        self.serial_line = line
        self.links.update(line.views)
        line.start()
        self._tick = asyncio.get_running_loop().create_task(self._ticker(), name="sim-tick")

    async def stop(self) -> None:
        await asyncio.gather(*(link.stop() for link in self.links.values()))
        if self._tick is not None:
            self._tick.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._tick
        for pump in self.pumps.values():
            pump.controller.hardware.safe_stop()
        if self._http is not None:
            await self._http.close()
        if self._control is not None:
            await self._control.cleanup()
            self._control = None

    async def _ticker(self) -> None:
        """Every pump's control tick (ramp, sensors, fault detection, dead-man) every tick_ms."""
        period = self.settings.tick_ms / 1000
        loop = asyncio.get_running_loop()
        due = loop.time()
        while True:
            for pump in self.pumps.values():
                try:
                    pump.tick()
                except Exception:  # one pump's bug must not stop the others
                    log.exception("%s: control tick failed", pump.slot)
            due += period
            now = loop.time()
            due = max(due, now)  # fell behind (a busy machine): skip, do not burst
            await asyncio.sleep(due - now)

    # -- the control interface --------------------------------------------------------------------

    def pump(self, slot: str) -> SimulatedPump:
        pump = self.pumps.get(slot)
        if pump is None:
            raise UnknownPump(f"no simulated pump {slot!r}; this simulator runs {', '.join(self.pumps)}")
        return pump

    def apply(self, slot: str, fault: str, clear: bool = False, seconds: float | None = None) -> dict[str, Any]:
        pump = self.pump(slot)
        if fault not in FAULTS:
            raise BadFault(f"unknown fault {fault!r}; valid faults: {', '.join(FAULTS)}")
        if seconds is not None and fault != "link_drop":
            raise BadFault("seconds applies to link_drop only (how long the pump stays offline)")
        if seconds is not None and clear:
            raise BadFault("clear and seconds do not go together: clear dials now, seconds keeps the pump offline")
        if seconds is not None and not 0 <= seconds <= MAX_OFFLINE_S:
            raise BadFault(f"seconds must be between 0 and {MAX_OFFLINE_S:g}")
        link = self.links.get(slot)
        if fault == "reboot":
            if clear:
                raise BadFault("reboot is an event, there is nothing to clear")
            pump.reboot()
            if link is not None:
                link.restart()
        elif fault == "link_drop":
            if link is not None:
                if clear:
                    link.reconnect()
                else:
                    link.drop(seconds)
        elif clear:
            pump.clear(fault)
        else:
            pump.inject(fault)
        log.info("%s: %s%s from the control endpoint", slot, fault, " cleared" if clear else "")
        return self.state(slot)

    def state(self, slot: str) -> dict[str, Any]:
        pump = self.pump(slot)
        link = self.links.get(slot)
        return {
            "slot": slot,
            "device_id": pump.device_id,
            "link": {
                "url": link.url if link else None,
                "connected": bool(link and link.connected),
                "links": link.links if link else 0,
                "offline_for_s": link.offline_for_s() if link else None,
                "last_down_reason": link.last_down_reason if link else None,
            },
            "injected": pump.injected(),
            "boots": pump.boots,
            "status": pump.status(),
            "requests": dict(pump.dispatcher.counts),
            "telemetry": pump.telemetry_counts(),
        }

    def states(self) -> list[dict[str, Any]]:
        return [self.state(slot) for slot in self.pumps]


async def run(
    gateway_url: str,
    settings: SimulatorSettings,
    control_port: int,
    security: LinkSecurity | None = None,
    mqtt: MqttTarget | None = None,
    serial: SerialTarget | None = None,
    held: Sequence[int] | None = None,
) -> None:
    """`mcp-gateway sim`: publish the pumps and serve the control endpoint until SIGTERM or SIGINT.
    `held`: the signals that came before the loop (gateway.cli.run.hold_signals, whose handlers these
    replace), acted on now."""
    # The handlers first: a signal during start-up stops the simulator cleanly (exit 0), not by the
    # default action (killed, 143).
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(signum, stop.set)
    if held is not None and callable(signal.getsignal(signal.SIGHUP)):
        signal.signal(signal.SIGHUP, signal.SIG_DFL)  # a hang-up ends the simulator (129), held or not
        if signal.SIGHUP in held:
            signal.raise_signal(signal.SIGHUP)
    if held and (signal.SIGTERM in held or signal.SIGINT in held):
        stop.set()
    simulator = Simulator(gateway_url, settings, security, mqtt, serial)
    control = await simulator.start_control(control_port)
    failed = False
    try:
        if not stop.is_set():
            try:
                simulator.start()
            except BaseException:
                failed = True  # the error says why; "stopped" would read as if it had run
                raise
            _announce(simulator, gateway_url, control)
        await stop.wait()
    finally:
        await simulator.stop()
        if not failed:
            print("simulator stopped", file=sys.stderr)


def _announce(simulator: Simulator, gateway_url: str, control: str) -> None:
    """Where the pumps publish and the control URL, on stdout."""
    mqtt = simulator.mqtt
    slots = simulator.settings.slots
    names = slots[0] if len(slots) == 1 else f"{slots[0]} ... {slots[-1]}"
    if simulator.serial_line is not None:
        line = simulator.serial_line
        port = (line.target.link or line.gateway_path) if line.target.pty else line.target.path
        framing = "envelopes, one slot per pump" if line.enveloped else "one slot"
        where = f"serial line {port} ({framing})"
        if line.target.pty:
            where += f"; serve it with: mcp-gateway run --serial {port}"
    elif mqtt is not None:
        pattern = (
            f"{mqtt.topic_prefix}/<slot>/..."
            if mqtt.profile == "plain"
            else f"$mcp-server/.../{mqtt.server_prefix}/<slot>"
        )
        where = f"{mqtt.url} ({mqtt.profile} profile, {pattern})"
    else:
        where = firmware.provider_url(gateway_url, slots[0]).rsplit("/", 1)[0] + "/<slot>"
    print(f"simulator: {len(slots)} pump(s), {names}, publishing to {where}")
    print(f"control: {control}   (mcp-gateway sim-status --control {control})", flush=True)
