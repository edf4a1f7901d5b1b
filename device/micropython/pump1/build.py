"""Boot-time composition of the pump-1 app: hardware, controller, tools, registry, dispatcher, link.

Needed once: main.py unloads this module (and mcpdevice.schema_index) after boot so that the heap
gets the room back.

API: build(settings) -> (hardware, controller, provider, watchdog)   settings: pump1.config.load();
     raises ValueError or OSError naming the problem (schema file missing or invalid, wss without CA).
"""

import sys

from mcpdevice.dispatcher import Dispatcher, tool_budget
from mcpdevice.log import log
from mcpdevice.provider import Provider, register_frame
from mcpdevice.websocket import WebSocketTransport, provider_url
from pump1 import FIRMWARE_NAME, FIRMWARE_VERSION, INSTRUCTIONS, SERVER_NAME, tools
from pump1.controller import PumpController
from pump1.schema_hash import SCHEMA_HASH


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


def _hardware(settings):
    if (settings["hardware"] or ("esp32" if sys.platform == "esp32" else "sim")) == "esp32":
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


def _tls(settings):
    url = settings["gateway_url"]
    if not (url.startswith("wss:") or url.startswith("https:")):
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
        raise ValueError("a wss:// gateway needs ca_file (or tls_insecure: true in a lab)")
    return context


def _watchdog(settings):
    machine = _machine()
    if not settings["watchdog_s"] or machine is None or not hasattr(machine, "WDT"):
        return None
    return machine.WDT(timeout=int(settings["watchdog_s"] * 1000))


def build(settings):
    from mcpdevice import schema_index

    frame_max = settings["frame_max_bytes"]
    registry = schema_index.load(_schema_path(settings), tool_budget(frame_max))
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
        {"name": SERVER_NAME, "version": FIRMWARE_VERSION},
        instructions=INSTRUCTIONS,
        frame_max=frame_max,
        log=log,
    )
    hello = {
        "device_id": _device_id(settings),
        "firmware": {"name": FIRMWARE_NAME, "version": FIRMWARE_VERSION},
        "schema": SCHEMA_HASH,
    }
    url = provider_url(settings["gateway_url"], settings["slot"])
    tls = _tls(settings)
    agent = "%s/%s" % (FIRMWARE_NAME, FIRMWARE_VERSION)
    timeout_s = settings["connect_timeout_s"]

    token = settings["provider_token"]

    def make_transport():
        return WebSocketTransport(url, frame_max, timeout_s, tls, agent, token)

    before_connect = None
    wifi = settings["wifi"]
    if wifi["ssid"]:
        from mcpdevice.wifi import ensure_station

        async def before_connect():
            await ensure_station(wifi["ssid"], wifi["password"], log=log)

    provider = Provider(
        dispatcher,
        make_transport,
        register_frame(hello),
        silence_s=settings["link_timeout_s"],
        backoff_min_s=settings["backoff_min_s"],
        backoff_max_s=settings["backoff_max_s"],
        on_heard=controller.heard,
        before_connect=before_connect,
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
    return hardware, controller, provider, _watchdog(settings)
