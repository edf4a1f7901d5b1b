"""One JSON object per line on the console for every notable event; never a secret.

API: log(event, **fields) prints {"t": seconds since start, "event": event, ...fields}.
On a board the console is the USB serial port (`mpremote` shows it); on the Unix port, stdout.
"""

import json

from mcpdevice.clock import ticks_diff, ticks_ms

_started = ticks_ms()


def log(event, **fields):
    fields["t"] = ticks_diff(ticks_ms(), _started) / 1000
    fields["event"] = event
    try:
        print(json.dumps(fields))
    except Exception:  # a field that does not serialise must not stop the device
        print('{"event":"%s","note":"unprintable fields"}' % event)
