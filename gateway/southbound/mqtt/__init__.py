"""Boards and MCP servers reached through MQTT brokers: one paho-mqtt connection per configured broker
(client.py, brokers.py), carrying the profiles it enables.

Provides `PlainLink` (plain.py, one board of the plain profile) and `McpLink` (mcp.py, one server of
MCP over MQTT), both on `MqttLink` (link.py); topics.py names every topic both profiles use.
"""
