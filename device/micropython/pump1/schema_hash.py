"""The canonical hash of device/schemas/pump-1.json, sent in the hello (docs/pump-1.md "Schema hash").

Computed where canonical JSON is easy, never on the board: after changing the schema file, run
`mcp-gateway schema-hash device/schemas/pump-1.json` and paste the result here. A test fails
while this constant and the file disagree.
"""

SCHEMA_HASH = "05bcc58176efee25"
