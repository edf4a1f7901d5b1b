"""Bring the ESP32's Wi-Fi station up before each dial (a no-op where there is no `network`).

API: await ensure_station(ssid, password, timeout_s=20, log=None) -> the board's IP address, or
None where the port has no `network` module (the Unix port uses the host's network).
Raises OSError naming the network when it does not come up in time; the provider then backs off.
"""

import asyncio


async def ensure_station(ssid, password, timeout_s=20, log=None):
    try:
        import network
    except ImportError:
        return None
    station = network.WLAN(network.STA_IF)
    if station.isconnected():
        return station.ifconfig()[0]
    station.active(True)
    station.connect(ssid, password)
    for _ in range(int(timeout_s * 10)):
        if station.isconnected():
            address = station.ifconfig()[0]
            if log is not None:
                log("wifi_up", ssid=ssid, ip=address)
            return address
        await asyncio.sleep(0.1)
    status = station.status()
    station.disconnect()
    raise OSError("Wi-Fi network %s did not connect within %d s (status %s)" % (ssid, timeout_s, status))
