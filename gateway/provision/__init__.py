"""Provisioning MicroPython boards from the gateway (`mcp-gateway device install`, `device update`):
the raw REPL over a serial port (raw_repl.py), the application compiled for the board (bundle.py),
the files and config.json written to it (board.py). docs/field-devices.md."""
