"""One gateway's telemetry: its tracing (trace context, and spans and metrics over OTLP when
[telemetry] is on) and its intake of providers' `broker/telemetry` (docs/telemetry.md).

With export off nothing of the OpenTelemetry SDK is imported: `tracing` is `OFF` and providers'
telemetry is counted and dropped. `start` builds the exporters (their threads start there), `reload`
swaps them for a new [telemetry] and retires the old ones on a thread of their own, and `shutdown`
flushes what waits, off the event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import threading
from collections.abc import Callable, Mapping
from typing import Any

from gateway.config import TelemetryConfig, TelemetryConfigError, TelemetrySettings, resolve_telemetry
from gateway.telemetry.metrics import Metrics
from gateway.telemetry.provider_telemetry import ExportSink, ProviderTelemetry
from gateway.telemetry.tracing import OFF, Tracing, run_side_by_side

log = logging.getLogger("gateway.telemetry")

RETIRE_GRACE_S = 1.0
"""After a reload, how long the old exporters still take spans of requests that began before it."""


class Telemetry:
    """The tracing the ways in hand each request, and the intake of providers' telemetry."""

    def __init__(
        self, config: TelemetryConfig, metrics: Metrics, max_slots: int, environ: Mapping[str, str] | None = None
    ) -> None:
        """Raises TelemetryConfigError for a [telemetry] or OTEL_* value that cannot be used."""
        self.metrics = metrics
        self.max_slots = max_slots
        self.environ = os.environ if environ is None else environ
        self.settings = resolve_telemetry(config, self.environ)
        self.tracing: Tracing = OFF
        """Read by the ways in for every request: OFF until start(), and while export is off."""
        self.intake = ProviderTelemetry(config.providers, metrics, max_slots)
        self.started = False
        self.reloads = 0

    @property
    def enabled(self) -> bool:
        return self.settings.enabled

    def start(self) -> None:
        self.started = True
        self._apply(self.settings)
        if self.settings.enabled:
            settings = self.settings
            log.info(
                "telemetry: exporting OTLP to %s (sampler %s, ratio %g, service %s)",
                settings.shown_endpoint(),
                settings.sampler,
                settings.ratio,
                settings.service_name,
            )

    def _apply(self, settings: TelemetrySettings) -> tuple[Tracing, ExportSink | None]:
        """Put `settings` in force; the tracing and export queue they replace are handed back."""
        tracing: Tracing = OFF
        sink: ExportSink | None = None
        if settings.enabled:
            # The SDK and its exporters load only here: a gateway with telemetry off never imports them.
            from gateway.telemetry.otlp_providers import ProviderExport
            from gateway.telemetry.otlp_tracing import SdkTracing

            tracing = SdkTracing(settings, self.metrics)
            if settings.config.providers.enabled:
                sink = ProviderExport(settings, self.metrics, self.max_slots)
        old = (self.tracing, self.intake.sink)
        self.tracing = tracing
        self.intake.configure(settings.config.providers, sink)
        return old

    def reload(self, config: TelemetryConfig) -> str | None:
        """Use a new [telemetry] from the next request on: new exporters are built and swapped in, and
        the old ones flush and stop on a thread of their own. None when it worked; else why the
        telemetry in force stays (the new section's words)."""
        try:
            settings = resolve_telemetry(config, self.environ)
        except TelemetryConfigError as exc:
            log.error("telemetry reload failed, the telemetry in force stays: %s", exc)
            return str(exc)
        if not self.started:
            self.settings = settings
            self.intake.configure(config.providers, None)
            return None
        try:
            old = self._apply(settings)
        except Exception as exc:  # an exporter the SDK refuses to build: keep what runs
            log.error("telemetry reload failed, the telemetry in force stays: %s", exc)
            return str(exc)
        self.settings = settings
        self.reloads += 1
        timeout_s = self.settings.config.export_timeout_ms / 1000
        threading.Thread(
            target=_retire, args=(old, RETIRE_GRACE_S, timeout_s), name="mcpgw-telemetry-retire", daemon=True
        ).start()
        log.info("telemetry reloaded: %s", "exporting to " + settings.shown_endpoint() if settings.enabled else "off")
        return None

    async def shutdown(self) -> None:
        """Flush what waits and stop the export threads, waiting export_timeout_ms at most: a collector
        that is away must not hold the gateway's stop (the daemon threads end with the process)."""
        old = (self.tracing, self.intake.sink)
        self.tracing = OFF
        self.intake.configure(self.intake.settings, None)
        if old == (OFF, None):
            return
        loop = asyncio.get_running_loop()
        timeout_s = self.settings.config.export_timeout_ms / 1000
        finished: asyncio.Future[bool] = loop.create_future()

        def answer(done: bool) -> None:
            if not finished.done():
                finished.set_result(done)

        def stop() -> None:
            done = False
            try:
                done = _retire(old, 0.0, timeout_s)
            finally:
                with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                    loop.call_soon_threadsafe(answer, done)

        threading.Thread(target=stop, name="mcpgw-telemetry-stop", daemon=True).start()
        # _retire returns within timeout_s; the second more only covers a thread slow to be scheduled.
        done = False
        with contextlib.suppress(TimeoutError):
            done = await asyncio.wait_for(asyncio.shield(finished), timeout_s + 1.0)
        if not done:
            log.warning("telemetry: the last exports did not finish within export_timeout_ms; they are dropped")

    def status(self) -> dict[str, Any]:
        settings = self.settings
        return {
            "enabled": settings.enabled,
            "endpoint": settings.shown_endpoint() if settings.enabled else None,
            "sampler": settings.sampler,
            "ratio": settings.ratio,
            "service_name": settings.service_name,
            "reloads": self.reloads,
            "provider_queue": queued() if (queued := getattr(self.intake.sink, "queued", None)) else None,
        }


def _retire(old: tuple[Tracing, ExportSink | None], grace_s: float, timeout_s: float) -> bool:
    """Stop the tracing and export queue a reload or shutdown replaced (blocking: its own thread), side
    by side so that together they take `timeout_s` (export_timeout_ms) at most, not that long each.
    True when every job said it finished within it (an export blocked on the collector for its whole
    timeout did not)."""
    if grace_s > 0:
        threading.Event().wait(grace_s)
    tracing, sink = old
    jobs: list[Callable[[], bool | None]] = [tracing.shutdown]
    if sink is not None:
        jobs.append(sink.shutdown)
    return run_side_by_side(jobs, timeout_s, "mcpgw-telemetry-retire")
