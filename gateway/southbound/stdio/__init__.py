"""MCP servers run as child processes, speaking newline-delimited JSON-RPC on stdio.

Provides `StdioLink` (link.py); supervisor.py starts the configured commands, restarts them when they
end and stops them.
"""
