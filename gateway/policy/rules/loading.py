"""load_policy: a [policy] section or a policy file, checked as a whole, made into the engine's Policy."""

from __future__ import annotations

from pathlib import Path

from gateway.config.policy import PolicyConfig
from gateway.policy.rules.checking import check_policy, check_policy_config, read_policy_file
from gateway.policy.rules.engine import Policy


def load_policy(source: PolicyConfig | str | Path) -> Policy:
    """The policy of a [policy] section (inline or its named file) or of a policy file; PolicyError
    lists every mistake when it cannot be used."""
    if isinstance(source, PolicyConfig):
        return Policy(check_policy_config(source))
    return Policy(check_policy(read_policy_file(source), source=f"policy file {source}"))
