"""The policy objects the core asks its questions through, built from [limits] (gateway/core/policy_interface.py)."""

from __future__ import annotations

from dataclasses import dataclass

from gateway.config import LimitsConfig
from gateway.core.policy_interface import Governance, Policies, ProviderGovernance
from gateway.policy.connection_limits import ConnectionLimiter
from gateway.policy.rate_limit import BucketSpec, RateLimiter


@dataclass(frozen=True)
class Limiters:
    """The rate limiter and the connection limiter of one gateway, kept concrete for the composition
    root (the listener and the HTTP entry use more of them than the core asks)."""

    rate: RateLimiter
    connections: ConnectionLimiter

    @classmethod
    def from_config(cls, limits: LimitsConfig) -> Limiters:
        rate = limits.rate
        return cls(
            RateLimiter(
                BucketSpec(rate.per_principal.rate_per_s, rate.per_principal.burst),
                BucketSpec(rate.per_slot.rate_per_s, rate.per_slot.burst),
                rate.max_buckets,
            ),
            ConnectionLimiter(limits.connections),
        )

    def for_core(self, governance: Governance | None = None, providers: ProviderGovernance | None = None) -> Policies:
        return Policies(
            rate_limits=self.rate, connections=self.connections, governance=governance, provider_governance=providers
        )
