"""Decisions about who may do what: origins and hosts, client and provider authentication, TLS, the
SSRF guard, and the bounds on what a peer may send or hold."""
