"""Flashing a board in the field: `mcp-gateway flash PORT` (docs/field.md, "Flashing a board").

One job per module:

errors      FlashError: a named error code, the message for the technician and the command's exit code.
firmware    which file to write: a path, or a name in the firmware directory, checked against its SHA256SUMS.
image       what the file is: an ESP image (magic 0xE9) and the chip its extended header names.
port        opening the serial port, with port-in-use, permission and missing-port errors told apart.
handover    asking a running gateway to let go of the port for the flash and to take it back after,
            also when the command is stopped by a signal (stop_signals).
board       the ROM loader through esptool's Python API: detect, write compressed, verify (MD5), reset.
progress    what the technician sees: lines and a progress bar, or one JSON line per step.
procedure   the steps in order; nothing is written before the image is known to be for this chip.

The command never fetches anything: images are local files.
"""
