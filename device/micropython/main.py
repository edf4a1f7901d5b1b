"""pump-1 entry point. ESP32: runs after boot.py with config.json from flash. Unix port:
`micropython -X heapsize=96K main.py --config PATH` (or PUMP1_CONFIG=PATH)."""

import gc
import sys


def _config_path():
    argv = sys.argv
    if "--config" in argv and argv.index("--config") + 1 < len(argv):
        return argv[argv.index("--config") + 1]
    try:
        from os import getenv
    except ImportError:  # no environment on a board
        return "config.json"
    return getenv("PUMP1_CONFIG") or "config.json"


# The transport module of each `transport` setting: only the configured one is loaded, because an
# unused one would hold heap that a 96 KB board needs.
TRANSPORT_MODULES = {
    "websocket": "mcpdevice.websocket",
    "mqtt": "mcpdevice.mqtt",
    "serial": "mcpdevice.serial_transport",
}


def _transport_module(path):
    # A peek at the file; config.load() below checks it whole and names whatever is wrong.
    try:
        import json

        with open(path) as f:
            return TRANSPORT_MODULES.get(json.load(f).get("transport"), "mcpdevice.websocket")
    except Exception:
        return "mcpdevice.websocket"


def _unload(name):
    # Boot-only modules go once used, so that the heap gets their room back.
    del sys.modules[name]
    parent, _, child = name.rpartition(".")
    delattr(sys.modules[parent], child)


def _boot(path):
    from mcpdevice.log import log
    from pump1 import FIRMWARE_NAME, FIRMWARE_VERSION

    log("boot", firmware=FIRMWARE_NAME, version=FIRMWARE_VERSION, platform=sys.platform, config=path)
    # Composition first, while no settings are held yet: compiling pump1.build and the controller
    # and physics it imports from source is the largest transient need of the boot, and with the
    # settings and config's leftovers already on the heap it ran out on a 96 KB board on MQTT.
    # Importing touches no pin; a config error is still reported before anything does.
    from pump1 import build, config

    try:
        settings = config.load(path)
    except config.ConfigError as exc:
        log("config_error", path=path, error=str(exc))
        _unload("pump1.build")
        return None, None
    finally:
        _unload("pump1.config")

    try:
        return build.build(settings), settings
    except (OSError, ValueError) as exc:
        log("config_error", path=path, error=str(exc))
        return None, None
    finally:
        _unload("pump1.build")
        if "mcpdevice.schema_index" in sys.modules:
            _unload("mcpdevice.schema_index")


# The modules that stay loaded come first, so that the boot-only ones stack above them and leave
# one free block behind when unloaded instead of holes between resident objects.
_path = _config_path()
__import__(_transport_module(_path))
gc.collect()
import mcpdevice.dispatcher  # noqa: E402, F401
import mcpdevice.registry  # noqa: E402, F401
import pump1.app  # noqa: E402, F401
import pump1.tools  # noqa: E402, F401

gc.collect()
_parts, _settings = _boot(_path)
gc.collect()
if _parts is not None:
    pump1.app.run(_parts, _settings)
