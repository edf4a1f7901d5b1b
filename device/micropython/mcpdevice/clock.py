"""Millisecond ticks that MicroPython and CPython both provide, for timers that must not drift.

API: ticks_ms() -> int, ticks_diff(later, earlier) -> int (milliseconds, wrap-safe on MicroPython).
Integer milliseconds, because an ESP32's single-precision floats lose whole seconds after days.
"""

import time

try:
    ticks_ms = time.ticks_ms
    ticks_diff = time.ticks_diff
except AttributeError:  # CPython

    def ticks_ms():
        return int(time.monotonic() * 1000)

    def ticks_diff(later, earlier):
        return later - earlier
