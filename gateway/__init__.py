"""mcp-gateway: an edge MCP broker that puts boards and MCP servers behind one governed endpoint."""

__version__ = "0.3.0"
