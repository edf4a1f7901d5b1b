"""Boot-time composition of the pump-1 app: hardware, controller, tools, registry, dispatcher, link.

Needed once: main.py unloads this module (and mcpdevice.schema_index) after boot so that the heap
gets the room back.

API: build(settings) -> (hardware, controller, provider, watchdog)   settings: pump1.config.load();
     raises ValueError or OSError naming the problem (schema file missing or invalid, TLS without CA).
The link is the WebSocket transport, or with `transport: "mqtt"` the plain MQTT profile
(mcpdevice.mqtt, on umqtt.simple), or with `transport: "serial"` COBS frames on a UART or tty
(mcpdevice.serial_transport); only the chosen transport's module is imported.
"""

import sys

from mcpdevice.dispatcher import Dispatcher, tool_budget
from mcpdevice.log import log
from mcpdevice.provider import Provider, register_frame
from pump1 import FIRMWARE_NAME, FIRMWARE_VERSION, INSTRUCTIONS, SERVER_NAME, tools
from pump1.controller import PumpController
from pump1.schema_hash import SCHEMA_HASH

# A TLS context wants one block of about 3 KB. main.py imports this module before it loads the
# config, and what loading the config leaves behind is too fragmented for that block: so the block
# is held from here and handed back right before the context is made (or unused, if no TLS).
_reserve = bytearray(3072)


def _release():
    global _reserve
    _reserve = None


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


def _tls(settings, secure, what):
    if not secure:
        return None
    import gc
    import ssl

    # The context wants one block of about 3 KB: the one held since import.
    _release()
    gc.collect()
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


def _link(settings, frame_max):
    """A function that makes a new transport of the configured kind for each dial."""
    timeout_s = settings["connect_timeout_s"]
    slot = settings["slot"]
    if settings["transport"] == "mqtt":
        mqtt = settings["mqtt"]
        # The TLS context before the transport's modules, for the same one block of heap.
        tls = _tls(settings, mqtt["tls"], "mqtts broker (mqtt.tls)")
        from mcpdevice.mqtt import MqttTransport

        port = mqtt["port"] or (8883 if tls else 1883)
        client_id = mqtt["client_id"] or "mcpb-" + slot
        broker, prefix, user, password, keepalive_s = (
            mqtt["broker"],
            mqtt["prefix"],
            mqtt["user"],
            mqtt["password"],
            mqtt["keepalive_s"],
        )

        def make_mqtt():
            return MqttTransport(
                broker, port, prefix, slot, client_id, user, password, keepalive_s, frame_max, timeout_s, tls, log
            )

        return make_mqtt
    if settings["transport"] == "serial":
        from mcpdevice.serial_transport import SerialTransport

        serial = settings["serial"]
        if not serial["path"] and serial["uart"] != "console" and sys.platform != "esp32":
            raise ValueError('serial transport on the Unix port needs serial.path (a tty) or serial.uart "console"')
        line = (serial["uart"], serial["baud"], serial["tx"], serial["rx"], serial["path"], frame_max, serial["rxbuf"])

        def make_serial():
            return SerialTransport(*line)

        return make_serial
    from mcpdevice.websocket import WebSocketTransport, provider_url

    url = provider_url(settings["gateway_url"], slot)
    tls = _tls(settings, url.startswith("wss:"), "wss:// gateway")
    agent = "%s/%s" % (FIRMWARE_NAME, FIRMWARE_VERSION)
    token = settings["provider_token"]

    def make_websocket():
        return WebSocketTransport(url, frame_max, timeout_s, tls, agent, token)

    return make_websocket


def build(settings):
    from mcpdevice import schema_index

    frame_max = settings["frame_max_bytes"]
    # The link first: a TLS context needs one block of about 3 KB, which the heap still has in one
    # piece before the schema is read.
    make_transport = _link(settings, frame_max)
    _release()
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
    url = make_transport().describe()

    wifi = settings["wifi"]
    if wifi["ssid"]:
        from mcpdevice.wifi import ensure_station
    watchdog = None  # armed last, below; the closure reads it when it runs

    async def before_connect():
        if wifi["ssid"]:
            await ensure_station(wifi["ssid"], wifi["password"], log=log)
        if watchdog is not None:
            # The dial's name lookup (getaddrinfo in asyncio.open_connection, or in umqtt) blocks
            # the whole event loop, the tick that feeds the watchdog too: give it all of watchdog_s.
            watchdog.feed()

    provider = Provider(
        dispatcher,
        make_transport,
        register_frame(hello, slot=settings["slot"] if settings["transport"] != "websocket" else None),
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
    watchdog = _watchdog(settings)
    return hardware, controller, provider, watchdog
