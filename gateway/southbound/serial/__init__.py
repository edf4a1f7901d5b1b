"""Boards on a UART or USB serial line, in COBS frames with a CRC-32 (framing.py).

Provides `SerialSlotLink` (ports.py): one per slot on a `SerialPort`, one slot or many per port;
opening.py opens a tty without resetting the board; hotplug.py attaches USB ports whose VID:PID is
listed and detaches them when unplugged.
"""
