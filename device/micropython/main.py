"""pump-1 entry point. ESP32: runs after boot.py with config.json from flash. Unix port:
`micropython -X heapsize=96K main.py --config PATH` (or PUMP1_CONFIG=PATH)."""

import gc
import sys

# The boot is ordered for the heap (96 KB on an ESP32 without PSRAM): the config first, into an
# empty heap, then unloaded, so that only the settings stay; then pump1.build, which compiles the
# app's modules in the order the heap wants and composes the app; then pump1.build goes too, and
# of the settings only what the app needs is kept.


def _config_path():
    argv = sys.argv
    if "--config" in argv and argv.index("--config") + 1 < len(argv):
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
        # What the app needs of the settings, not the settings: they stay behind with the boot.
        return build.build(settings), settings["tick_ms"], settings["heap_log_s"]
    except (OSError, ValueError) as exc:
        log("config_error", path=path, error=str(exc))
        return None
    finally:
        _unload("pump1.build")


_app = _boot(_config_path())
gc.collect()
if _app is not None:
    import pump1.app  # noqa: E402

    pump1.app.run(*_app)
