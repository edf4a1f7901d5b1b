"""One simulated pump-1: the board's physics, simulated hardware, controller, tools and dispatcher.

The physical pump (sim.firmware.physics.PumpPhysics: speed, motor temperature and the injected
conditions) outlives a reboot; the board (controller, dispatcher, their counters) does not. That is
what a real reboot does: the drive stops when the board's outputs fall to zero, the motor stays as
warm as it was, a dry suction side stays dry, and the new firmware starts with run_hours and uptime
at 0 (the board keeps neither in flash).

Fault conditions (dry_run, overtemp, sensor_failure) are the physics model's own injections:
- dry_run: no water. Flow reads 0 and pressure almost nothing; the controller latches `dry_run` once
  the pump has run dry for dry_run_s, so a stopped pump trips only after it is started.
- overtemp: blocked cooling. The winding jumps just above the trip limit, so the drive trips on the
  next tick, and keeps heating while the condition lasts; once cleared it cools with the thermal lag
  and reset_fault succeeds below 85 degC.
- sensor_failure: the flow and pressure loops read nothing (null); the pump trips on the next tick
  and reset_fault succeeds once the condition is cleared.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from sim import firmware

log = logging.getLogger("sim")

OVERTEMP_JUMP_C = 5.0  # how far above the trip limit an injected overtemp puts the winding


@dataclass(frozen=True)
class PumpSettings:
    """What each simulated board is configured with (the board's config keys of the same names)."""

    deadman_s: float = 90.0
    dry_run_s: float = 5.0
    default_setpoint_rpm: int = 1450
    thermal_tau_s: float = 60.0
    frame_max_bytes: int = firmware.BOARD_FRAME_MAX
    telemetry: bool = True
    """broker/telemetry notifications (the board's `telemetry.enabled`): state changes and samples."""
    telemetry_period_s: float = 10.0
    """A sample this often (the board's `telemetry.sample_s`); 0: state changes only."""
    telemetry_queue: int = 8
    """Records held while the link is down or slow (the board's `telemetry.queue_size`); the oldest goes."""


class SimulatedPump:
    def __init__(self, slot: str, registry: Any, settings: PumpSettings) -> None:
        self.slot = slot
        self.device_id = f"sim-{slot}"
        self.settings = settings
        self._registry = registry
        self.physics: Any = firmware.physics.PumpPhysics(thermal_tau_s=settings.thermal_tau_s)
        self.boots = 0
        self.controller: Any = None
        self.dispatcher: Any = None
        self.telemetry: Any = None
        """The board's mcpdevice.telemetry.Telemetry of this boot (None with telemetry off); each link
        sends its queue with its report() task."""
        self._sampled = 0.0
        self._boot()

    def _boot(self) -> None:
        hardware = firmware.hardware_sim.SimulatedHardware(self.physics)
        settings = self.settings
        # A new boot, a new queue: what the board had not sent yet is lost with its RAM.
        self.telemetry = (
            firmware.telemetry.Telemetry(settings.telemetry_queue, settings.telemetry_period_s)
            if settings.telemetry
            else None
        )
        self.controller = firmware.controller.PumpController(
            hardware,
            deadman_s=settings.deadman_s,
            default_setpoint_rpm=settings.default_setpoint_rpm,
            dry_run_s=settings.dry_run_s,
            on_event=self._event,
            telemetry=self.telemetry,
        )
        self.dispatcher = firmware.dispatcher.Dispatcher(
            self._registry,
            firmware.tools.handlers(self.controller),
            firmware.SERVER_INFO,
            instructions=firmware.INSTRUCTIONS,
            frame_max=settings.frame_max_bytes,
            log=self._event,
            telemetry=self.telemetry,
        )
        self._sampled = time.monotonic()
        self.boots += 1

    def _event(self, event: str, **fields: Any) -> None:
        # The board's own log events (fault, fault_reset, request_error, duplicate_request).
        level = logging.INFO if event in ("fault", "fault_reset") else logging.DEBUG
        log.log(level, "%s %s %s", self.slot, event, fields.get("code") or fields.get("detail") or "")

    # -- what the link and the tick call --------------------------------------------------------

    def tick(self) -> None:
        """The board's control tick: the controller, then the periodic sample when it is due."""
        self.controller.tick()
        telemetry = self.telemetry
        if telemetry is not None and telemetry.sample_ms:
            now = time.monotonic()
            if (now - self._sampled) * 1000 >= telemetry.sample_ms:
                self._sampled = now
                self.controller.sample()

    def heard(self) -> None:
        """A frame or a ping from the gateway: feeds the dead-man, as on the board."""
        self.controller.heard()

    def new_link(self) -> None:
        """A new WebSocket connection, a new gateway session whose request ids may start over: the
        dispatcher's repeat cache is emptied, as the board's link loop does (Dispatcher.new_link).
        MQTT and serial links never call it: their gateway never repeats an id."""
        self.dispatcher.new_link()

    def handle(self, frame: bytes) -> bytes | None:
        return firmware.assemble(self.dispatcher.handle(frame))

    def oversize(self, size: int, head: bytes) -> bytes:
        answer: bytes = self.dispatcher.oversize(size, head)
        return answer

    # -- the control interface ------------------------------------------------------------------

    def injected(self) -> list[str]:
        return [kind for kind in firmware.FAULT_CONDITIONS if self.physics.injected(kind)]

    def inject(self, condition: str) -> None:
        self.physics.inject(condition)
        if condition == "overtemp":
            self.physics.motor_temp_c = max(self.physics.motor_temp_c, firmware.TRIP_C + OVERTEMP_JUMP_C)
        self.tick()  # let the board see it now rather than on the next tick

    def clear(self, condition: str) -> None:
        self.physics.clear(condition)
        self.tick()

    def reboot(self) -> None:
        self.controller.hardware.safe_stop()
        self._boot()
        log.info("%s rebooted (boot %d)", self.slot, self.boots)

    def status(self) -> dict[str, Any]:
        """The status object get_status returns, read without counting as contact from the gateway."""
        status: dict[str, Any] = self.controller.status()
        return status

    def report(self, send: Callable[[bytes], Awaitable[Any]]) -> asyncio.Task[None] | None:
        """Start the board's telemetry task (Telemetry.report) on a link: its queue goes out through
        `send(frame)`, one notification at a time, until the task is cancelled (the link ends) or a
        send raises. None with telemetry off. Call it in the running event loop."""
        if self.telemetry is None:
            return None
        # The board's coroutine is the task's own: a task cancelled before its first step closes its
        # coroutine, where a wrapper would leave an inner one never awaited (a RuntimeWarning).
        task: asyncio.Task[None] = asyncio.get_running_loop().create_task(
            self.telemetry.report(_Frames(send)), name=f"sim-telemetry-{self.slot}"
        )
        return task

    def telemetry_counts(self) -> dict[str, int] | None:
        """The records waiting and those dropped (queue full, or the link failed), or None with telemetry off."""
        telemetry = self.telemetry
        if telemetry is None:
            return None
        return {"queued": len(telemetry.queue), "dropped": int(telemetry.dropped)}


class _Frames:
    """The transport Telemetry.report() sends through: a notification's parts joined into one frame."""

    def __init__(self, send: Callable[[bytes], Awaitable[Any]]) -> None:
        self._send = send

    async def send(self, parts: list[bytes]) -> None:
        await self._send(b"".join(parts))
