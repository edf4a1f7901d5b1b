"""Reloading the whole configuration at run time (SIGHUP, `mcp-gateway reload`): docs/reload.md.

source.py: where the configuration comes from; diff.py: which keys differ and how that is said;
plan.py: refuse it whole or prepare every part; parts/: one module per part that can change;
reloader.py: one reload at a time, swapped and settled, reported.
"""

from gateway.reload.reloader import BrokerReloading, Reloader
from gateway.reload.report import ReloadReport
from gateway.reload.source import ConfigSource

__all__ = ["BrokerReloading", "ConfigSource", "ReloadReport", "Reloader"]
