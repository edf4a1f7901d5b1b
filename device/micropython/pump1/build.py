"""Boot-time composition of the pump-1 app: hardware, controller, tools, registry, dispatcher, link."""

# Needed once: main.py imports it right after the config, before anything of the app (it imports
# the app's modules itself, in the order the heap wants), and unloads it after boot so that the heap
# gets the room back; mcpdevice.schema_index goes as soon as the schema is indexed.
#
# API: build(settings) -> (hardware, controller, provider, watchdog)   settings: pump1.config.load();
#          raises ValueError or OSError naming the problem (schema file missing or invalid, TLS without CA)
# The telemetry (mcpdevice.telemetry) is not composed here: main.py compiles it once this module is
# unloaded, because at the end of the boot the heap has too little room left to compile it.
#      tls_context(settings) -> the link's ssl.SSLContext, or None without TLS (same errors)
# The link is the WebSocket transport, or with `transport: "mqtt"` the plain MQTT profile
# (mcpdevice.mqtt, on umqtt.simple), or with `transport: "serial"` COBS frames on a UART or tty
# (mcpdevice.serial_transport); only the chosen transport's module is imported.

import gc
import sys
from collections import OrderedDict

from mcpdevice.log import log
from pump1 import FIRMWARE_NAME, FIRMWARE_VERSION, INSTRUCTIONS, SERVER_NAME
from pump1.schema_hash import SCHEMA_HASH

# The app's modules, imported by build() in this order, each after a collection. The WebSocket
# transport compiles mcpdevice.provider itself, through its own import: loading it ahead of the
# transport instead leaves the heap too broken up to boot in 88 KB (tests/device/test_heap_headroom.py).
# Only the configured transport, hardware backend and Wi-Fi are loaded: an unused one would hold
# heap that the board needs.
_FIRST = ("mcpdevice.dispatcher", "pump1.controller", "mcpdevice.registry")
_TRANSPORT_MODULES = {
    "websocket": ("mcpdevice.websocket",),
    "mqtt": ("umqtt.simple", "mcpdevice.mqtt_client", "mcpdevice.mqtt"),
    "serial": ("mcpdevice.framing", "mcpdevice.serial_transport"),
}
_THEN = ("mcpdevice.provider", "pump1.app", "pump1.tools")
# Functions of resident modules that only the boot uses (assemble: only a CPython caller), dropped
# once the app is composed: a board has no heap for code it will not run again.
_BOOT_ONLY = (
    ("mcpdevice.dispatcher", "tool_budget"),
    ("mcpdevice.dispatcher", "assemble"),
    ("mcpdevice.provider", "register_frame"),
    ("mcpdevice.provider", "factory"),
)


def _machine():
    try:
        import machine
    except ImportError:
        return None
    return machine


def _device_id(settings):
    machine = _machine()
    if settings["device_id"]:
        return settings["device_id"]
    if machine is not None and hasattr(machine, "unique_id"):
        return ":".join("%02x" % byte for byte in machine.unique_id())  # the MAC on an ESP32
    return "unix-" + settings["slot"]


def _schema_path(settings):
    if settings["schema_path"]:
        return settings["schema_path"]
    here = __file__.rsplit("/", 2)[0] if __file__.count("/") > 1 else "."
    for candidate in ("pump-1.json", here + "/pump-1.json", here + "/../schemas/pump-1.json"):
        try:
            open(candidate).close()
            return candidate
        except OSError:
            pass
    raise OSError("schema file pump-1.json not found: copy it to the board or set schema_path")


def _hardware_kind(settings):
    return settings["hardware"] or ("esp32" if sys.platform == "esp32" else "sim")


def _hardware(settings):
    if _hardware_kind(settings) == "esp32":
        from pump1.hardware_esp32 import Esp32Hardware

        return Esp32Hardware(settings["esp32"])
    from pump1.hardware_sim import SimulatedHardware

    return SimulatedHardware()


def _der(data):
    # Some ports' mbedTLS is built without PEM parsing (the Unix port's is): hand it DER, which
    # every port reads. The first certificate of a PEM file is the CA the board trusts.
    begin = data.find(b"-----BEGIN CERTIFICATE-----")
    if begin < 0:
        return data
    end = data.find(b"-----END", begin)
    import binascii

    return binascii.a2b_base64(data[begin + 27 : end if end > 0 else len(data)].replace(b"\n", b"").replace(b"\r", b""))


def tls_context(settings):
    """The TLS context of the configured link, or None without TLS (it wants one block of 3 KB)."""
    if settings["transport"] == "mqtt":
        return _tls(settings, settings["mqtt"]["tls"], "mqtts broker (mqtt.tls)")
    url = settings["gateway_url"]
    if settings["transport"] == "websocket":
        return _tls(settings, url.startswith("wss:") or url.startswith("https:"), "wss:// gateway")
    return None


def _tls(settings, secure, what):
    if not secure:
        return None
    import ssl

    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    if settings["tls_insecure"]:
        context.verify_mode = ssl.CERT_NONE
    elif settings["ca_file"]:
        with open(settings["ca_file"], "rb") as f:
            context.load_verify_locations(cadata=_der(f.read()))
        # MicroPython's client context starts at CERT_NONE (CPython's at CERT_REQUIRED): without
        # this line any certificate would be accepted, whatever the CA file says.
        context.verify_mode = ssl.CERT_REQUIRED
    else:
        raise ValueError("a %s needs ca_file (or tls_insecure: true in a lab)" % what)
    return context


def _watchdog(settings):
    machine = _machine()
    if not settings["watchdog_s"] or machine is None or not hasattr(machine, "WDT"):
        return None
    return machine.WDT(timeout=int(settings["watchdog_s"] * 1000))


def _link(settings, frame_max, tls, resolve):
    """A function that makes a new transport of the configured kind for each dial."""
    from mcpdevice.provider import factory

    timeout_s = settings["connect_timeout_s"]
    slot = settings["slot"]
    if settings["transport"] == "mqtt":
        from mcpdevice.mqtt import MqttTransport

        mqtt = settings["mqtt"]

        return factory(
            MqttTransport,
            mqtt["broker"],
            mqtt["port"] or (8883 if tls else 1883),
            mqtt["prefix"],
            slot,
            mqtt["client_id"] or "mcpb-" + slot,
            mqtt["user"],
            mqtt["password"],
            mqtt["keepalive_s"],
            frame_max,
            timeout_s,
            tls,
            log,
            resolve,
        )
    if settings["transport"] == "serial":
        from mcpdevice.serial_transport import SerialTransport

        serial = settings["serial"]
        if not serial["path"] and serial["uart"] != "console" and sys.platform != "esp32":
            raise ValueError('serial transport on the Unix port needs serial.path (a tty) or serial.uart "console"')
        return factory(
            SerialTransport,
            serial["uart"],
            serial["baud"],
            serial["tx"],
            serial["rx"],
            serial["path"],
            frame_max,
            serial["rxbuf"],
        )
    from mcpdevice.websocket import WebSocketTransport, provider_url

    url = settings["gateway_url"]
    # One gateway's URL (scheme, host, a port from 1 to 65535): a list of gateways or a missing scheme
    # is a config_error here, not a link_down at every dial.
    name, _, host = url.partition("://")
    host = host.partition("/")[0]
    port = "80"
    if host.rfind(":") > host.rfind("]"):
        host, _, port = host.rpartition(":")
    if (
        name not in ("ws", "wss", "http", "https")
        or not host.strip("[]")
        or not port.isdigit()
        or not 0 < int(port) < 65536
        or any(name in url for name in " ,@\t\r\n")  # a list, a user, spaces
    ):
        raise ValueError(
            "gateway_url must be one gateway's URL, ws://HOST[:PORT][/PATH] or wss://..., not %r"
            # Not quoted with a user part: user:password@ must not reach the log.
            % (url if "@" not in url else "a URL with a user part (not shown)")
        )
    url = provider_url(url, slot)
    agent = "%s/%s" % (FIRMWARE_NAME, FIRMWARE_VERSION)
    return factory(WebSocketTransport, url, frame_max, timeout_s, tls, agent, settings["provider_token"], resolve)


def _unload(name):
    del sys.modules[name]
    parent, _, child = name.rpartition(".")
    delattr(sys.modules[parent], child)


def _load(names):
    for name in names:
        gc.collect()  # what the last compile freed is one block again, where it can be
        __import__(name)


def _registry(settings, budget):
    from mcpdevice import schema_index

    try:
        return schema_index.load(_schema_path(settings), budget)
    finally:
        _unload("mcpdevice.schema_index")  # needed once, like this module


def build(settings):
    # The order is the heap's (measured with `python -m bench.device_heap` and the heap gate):
    # compiling a module from source needs several times its size while it runs and leaves its code
    # behind between the holes of what it freed, so what needs one large block comes first, while
    # the heap is still in one piece: the largest compiles, the schema index (unloaded once read).
    # The TLS context (about 3 KB in one block, with the CA) comes after the compiles: held
    # through them it would break up the room they need.
    _load(_FIRST)
    from mcpdevice.dispatcher import Dispatcher, tool_budget

    frame_max = settings["frame_max_bytes"]
    registry = _registry(settings, tool_budget(frame_max))
    wifi = ("mcpdevice.wifi",) if settings["wifi"]["ssid"] else ()
    hardware_module = "pump1.hardware_" + _hardware_kind(settings)
    _load(_TRANSPORT_MODULES[settings["transport"]] + _THEN + (hardware_module,) + wifi)
    from mcpdevice.provider import Provider, register_frame
    from pump1 import tools
    from pump1.app import Dial
    from pump1.controller import PumpController

    gc.collect()  # what the compiles left is one block again, for the TLS context
    tls = tls_context(settings)

    # Nothing made here may be a function of this module's own: main.py unloads it after boot, and
    # a closure would keep all of its code on the heap (the factory and Dial live in resident modules).
    dial = Dial(log)
    make_transport = _link(settings, frame_max, tls, dial.address)
    hardware = _hardware(settings)
    controller = PumpController(
        hardware,
        deadman_s=settings["deadman_s"],
        default_setpoint_rpm=settings["default_setpoint_rpm"],
        dry_run_s=settings["dry_run_s"],
        on_event=log,
    )
    dispatcher = Dispatcher(
        registry,
        tools.handlers(controller),
        OrderedDict(name=SERVER_NAME, version=FIRMWARE_VERSION),
        instructions=INSTRUCTIONS,
        frame_max=frame_max,
        log=log,
    )
    hello = {
        "device_id": _device_id(settings),
        "firmware": {"name": FIRMWARE_NAME, "version": FIRMWARE_VERSION},
        "schema": SCHEMA_HASH,
    }
    url = make_transport().describe()

    wifi = settings["wifi"]
    if wifi["ssid"]:
        from mcpdevice.wifi import ensure_station

        dial.station = (ensure_station, wifi["ssid"], wifi["password"])
    dial.at_rest = controller.at_rest
    provider = Provider(
        dispatcher,
        make_transport,
        register_frame(hello, slot=settings["slot"] if settings["transport"] != "websocket" else None),
        silence_s=settings["link_timeout_s"],
        backoff_min_s=settings["backoff_min_s"],
        backoff_max_s=settings["backoff_max_s"],
        on_heard=controller.heard,
        before_connect=dial.prepare,
        log=log,
    )
    log(
        "ready",
        slot=settings["slot"],
        url=url,
        device_id=hello["device_id"],
        schema=SCHEMA_HASH,
        tools=len(registry.names),
        deadman_s=settings["deadman_s"],
    )
    dial.watchdog = watchdog = _watchdog(settings)
    _unload("pump1.schema_hash")  # its hash is in the register frame now
    for module, name in _BOOT_ONLY:
        setattr(sys.modules[module], name, None)  # its code leaves the heap
    return hardware, controller, provider, watchdog
