"""discovery layer: mDNS advertisement of the gateway and the browser behind `mcp-gateway discover`."""
