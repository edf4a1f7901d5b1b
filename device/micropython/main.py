"""pump-1 entry point. ESP32: runs after boot.py with config.json from flash. Unix port:
`micropython -X heapsize=96K main.py --config PATH` (or PUMP1_CONFIG=PATH)."""

import gc
import sys

# The boot is ordered for the heap (96 KB on an ESP32 without PSRAM): the config first, into an
# empty heap, then unloaded, so that only the settings stay; then pump1.build, which compiles the
# app's modules in the order the heap wants and composes the app; then pump1.build goes too, the
# telemetry is compiled into the room it left, and of the settings only what the app needs is kept.


def _config_path():
    argv = sys.argv
    if "--config" in argv[:-1]:  # a value follows it
        return argv[argv.index("--config") + 1]
    try:
        from os import getenv
    except ImportError:  # no environment on a board
        return "config.json"
    return getenv("PUMP1_CONFIG") or "config.json"


def _unload(name):
    # Boot-only modules go once used, so that the heap gets their room back.
    del sys.modules[name]
    parent, _, child = name.rpartition(".")
    delattr(sys.modules[parent], child)


def _settings(path, log):
    from pump1 import config

    try:
        return config.load(path)
    except config.ConfigError as exc:
        log("config_error", path=path, error=str(exc))
        return None
    finally:
        _unload("pump1.config")


def _boot(path):
    from mcpdevice.log import log
    from pump1 import FIRMWARE_NAME, FIRMWARE_VERSION

    log("boot", firmware=FIRMWARE_NAME, version=FIRMWARE_VERSION, platform=sys.platform, config=path)
    settings = _settings(path, log)
    if settings is None:
        return None
    gc.collect()
    from pump1 import build

    try:
        parts = build.build(settings)
    except (OSError, ValueError) as exc:
        log("config_error", path=path, error=str(exc))
        return None
    finally:
        _unload("pump1.build")
    # What the app needs of the settings, not the settings: they stay behind with the boot.
    kept = parts, settings["tick_ms"], settings["heap_log_s"]
    reporting = settings["telemetry"]
    del settings
    if reporting["enabled"]:
        # The telemetry (docs/pump-1.md "Telemetry"): compiled into the room pump1.build and the
        # settings leave, as the end of the boot has too little; wired to the calls' trace context
        # (the dispatcher), the link (the provider) and the pump's state changes and samples (the
        # controller).
        del build
        gc.collect()
        from mcpdevice.telemetry import Telemetry

        controller, provider = parts[1], parts[2]
        telemetry = Telemetry(reporting["queue_size"], reporting["sample_s"])
        controller.telemetry = provider.telemetry = provider.dispatcher.telemetry = telemetry
    return kept


_app = _boot(_config_path())
if _app is None and sys.argv:
    # The app did not start (a config_error line said why). The Unix port (a command line in
    # sys.argv) exits 1, so that a supervisor or script sees the failure. A board (sys.argv empty)
    # just ends main.py and leaves the REPL: sys.exit() from main.py would soft-reset it, into
    # the same config_error again and again.
    raise SystemExit(1)
gc.collect()
# Collect early and often from here on, as boot.py sets up an ESP32 (which runs it before this file)
# on every port: what ends a small board is fragmentation, not total use.
gc.threshold(gc.mem_free() // 4)
if _app is not None:
    import pump1.app  # noqa: E402

    pump1.app.run(*_app)
