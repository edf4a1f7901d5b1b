"""Decisions about who may do what: origins and hosts now; authentication and authority later."""
