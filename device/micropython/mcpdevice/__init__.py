"""mcpdevice: a small MCP provider library for MicroPython boards (dispatcher, tool registry, transports).

Modules: dispatcher (JSON-RPC/MCP over frames), registry (tools from a schema file), results (tool
result objects), provider (link loop with back-off and silence watchdog), websocket (transport),
wifi (ESP32 station), log (one JSON line per event), clock (ticks shared with CPython).
"""

VERSION = "0.1.0"
