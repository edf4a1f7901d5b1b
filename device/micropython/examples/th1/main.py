"""th-1: a temperature and humidity sensor on mcpdevice, the example of docs/device-own.md.

Two tools from th-1.json (read, set_interval), one resource (th1://reading, the last reading) that a
client may subscribe to, and a sampling task that tells subscribers of each new reading. Board:
config.json beside this file. Unix port: micropython main.py --config PATH.
"""

import asyncio
import json
import sys
from collections import OrderedDict

from mcpdevice import results, schema_index
from mcpdevice.dispatcher import Dispatcher, tool_budget
from mcpdevice.log import log
from mcpdevice.provider import Provider, factory, register_frame
from mcpdevice.websocket import WebSocketTransport, provider_url
from mcpdevice.wifi import ensure_station

SCHEMA_HASH = "bc4a0f04b5510f40"  # mcp-gateway schema-hash th-1.json
URI = "th1://reading"
FRAME_MAX = 4096


class Sensor:
    """Simulated; on a board, measure() reads the real sensor (an SHT31 on I2C, say)."""

    def __init__(self):
        self.interval_s = 60
        self.count = 0
        self.last = None

    def measure(self):
        self.count += 1
        self.last = OrderedDict(temperature_c=21.5 + self.count % 5 / 10, humidity_pct=45.0, interval_s=self.interval_s)
        return self.last


def tools(sensor):
    def read(arguments):
        if arguments:
            return results.error("read takes no arguments.")
        return results.ok(sensor.measure())

    def set_interval(arguments):
        value = arguments.get("interval_s")
        if type(value) is not int or not 1 <= value <= 3600 or len(arguments) != 1:
            return results.error("set_interval needs interval_s, a whole number of seconds from 1 to 3600.")
        sensor.interval_s = value
        return results.ok(sensor.measure())

    return {"read": read, "set_interval": set_interval}


def methods(sensor, subscribed):
    resource = OrderedDict(uri=URI, name="reading", mimeType="application/json")

    def read_resource(params):
        if params.get("uri") != URI:
            raise ValueError(-32002, "Resource not found: %s. This device has %s" % (params.get("uri"), URI))
        text = json.dumps(sensor.last or sensor.measure())
        return {"contents": [OrderedDict(uri=URI, mimeType="application/json", text=text)]}

    def subscribe(params):
        subscribed.add(params.get("uri"))
        return {}

    def unsubscribe(params):
        subscribed.discard(params.get("uri"))
        return {}

    return {
        "resources/list": lambda params: {"resources": [resource]},
        "resources/read": read_resource,
        "resources/subscribe": subscribe,
        "resources/unsubscribe": unsubscribe,
    }


async def sample(provider, sensor, subscribed):
    waited = 0
    while True:
        await asyncio.sleep(1)  # a second at a time: a new interval takes effect at once
        waited += 1
        if waited < sensor.interval_s:
            continue
        waited = 0
        sensor.measure()
        if URI in subscribed:
            await provider.notify("notifications/resources/updated", {"uri": URI})


async def run(provider, sensor, subscribed):
    asyncio.create_task(sample(provider, sensor, subscribed))
    await provider.run()


def main():
    path = sys.argv[sys.argv.index("--config") + 1] if "--config" in sys.argv else "config.json"
    with open(path) as f:
        config = json.load(f)
    sensor = Sensor()
    subscribed = set()
    dispatcher = Dispatcher(
        schema_index.load(config.get("schema_path", "th-1.json"), tool_budget(FRAME_MAX)),
        tools(sensor),
        OrderedDict(name="th-1", version="0.1.0"),
        instructions="Call read for the temperature and humidity now; read th1://reading for the last one.",
        frame_max=FRAME_MAX,
        log=log,
        capabilities=OrderedDict(tools={"listChanged": False}, resources={"subscribe": True}),
        methods=methods(sensor, subscribed),
    )
    url = provider_url(config["gateway_url"], config["slot"])
    hello = {
        "device_id": config.get("device_id", "th-1-" + config["slot"]),
        "firmware": {"name": "th-1-micropython", "version": "0.1.0"},
        "schema": SCHEMA_HASH,
    }
    wifi = config.get("wifi")  # {"ssid": ..., "password": ...} on a board; none on the Unix port
    provider = Provider(
        dispatcher,
        factory(WebSocketTransport, url, FRAME_MAX, 10, None, "th-1/0.1.0", config.get("provider_token")),
        register_frame(hello),
        before_connect=(lambda: ensure_station(wifi["ssid"], wifi["password"], log=log)) if wifi else None,
        log=log,
    )
    log("ready", url=url, schema=SCHEMA_HASH)
    asyncio.run(run(provider, sensor, subscribed))


main()
