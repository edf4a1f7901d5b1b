"""The bounds [[execution_limits]] rules are checked against; a module of its own so the policy checker
can import them without importing the compiled rules (which import the policy rules package)."""

DAY_MS = 86_400_000
"""The longest window a rule may have."""
GROUP_BY = ("subject", "provider", "capability", "resource")
"""What a rule may partition its counters by."""
DEFAULT_MAX_KEYS = 4096
"""Groups (counter sets) a rule keeps when it sets no max_keys."""
MAX_KEYS_CEILING = 1_000_000
