"""Providers' governance on mcp-broker's wire (docs/governance-providers.md).

wire.py (method names, codes, reason codes, resource paths), limits.py (resource limits and their
intersection), validation.py (broker/authorization/declare checked whole), registry.py (declarations,
domain owners, live slots), caller_refs.py, results.py (decisions waiting for broker/audit/result),
authorize.py (broker/authorize read and decided), authority.py (ProviderAuthority, the core's
ProviderGovernance).
"""
