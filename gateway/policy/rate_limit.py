"""Token-bucket rate limits per principal and per slot (pure: the caller passes the time).

A bucket holds up to `burst` tokens and refills at `rate_per_s`; each client request takes one.
A request finding less than one token is refused with the time until one is back, which becomes
`Retry-After` / `retryAfterMs` for the client. Buckets live in bounded tables: a bucket that has
refilled to `burst` is indistinguishable from a new one, so idle buckets are dropped without
losing anything; only when a table is full of recently used buckets does the least recently used
one go (its owner then starts again from a full bucket, which the bound makes rare and harmless).
"""

from __future__ import annotations

import math
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass

from gateway.config.base import MAX_DURATION_S
from gateway.core.principal import Principal
from gateway.policy.rules.subjects import caller_name, subjects_of

PRINCIPAL = "principal"
SLOT = "slot"

Clock = Callable[[], float]


@dataclass(frozen=True)
class BucketSpec:
    """How fast a bucket refills and how many requests it lets through at once; rate 0 = no limit."""

    rate_per_s: float
    burst: int

    @property
    def enabled(self) -> bool:
        return self.rate_per_s > 0 and self.burst > 0

    def describe(self) -> str:
        return f"{self.rate_per_s:g}/s, burst {self.burst}"


class TokenBucket:
    __slots__ = ("tokens", "updated")

    def __init__(self, spec: BucketSpec, now: float) -> None:
        self.tokens = float(spec.burst)
        self.updated = now

    def refill(self, spec: BucketSpec, now: float) -> float:
        """Bring the bucket up to `now`; returns the tokens it holds."""
        if now > self.updated:
            self.tokens = min(float(spec.burst), self.tokens + (now - self.updated) * spec.rate_per_s)
            self.updated = now
        return self.tokens

    def wait_s(self, spec: BucketSpec) -> float:
        """Seconds until the bucket holds one token again (0 when it holds one now), at most 30 days
        (MAX_DURATION_S): Retry-After and retryAfterMs must stay numbers a client and JSON take."""
        missing = 1.0 - self.tokens
        return 0.0 if missing <= 0 else min(missing / spec.rate_per_s, float(MAX_DURATION_S))

    def full(self, spec: BucketSpec, now: float) -> bool:
        return self.tokens + (now - self.updated) * spec.rate_per_s >= spec.burst


class BucketTable:
    """Buckets by key (a principal name, a slot name), at most `max_buckets` of them."""

    def __init__(self, spec: BucketSpec, max_buckets: int) -> None:
        self.spec = spec
        self.max_buckets = max_buckets
        self.buckets: OrderedDict[Hashable, TokenBucket] = OrderedDict()
        """Least recently used first, so idle buckets are found at the front."""
        self.evicted_in_use = 0
        """Buckets dropped while not yet full (the table was full of active keys)."""

    def bucket(self, key: Hashable, now: float) -> TokenBucket:
        bucket = self.buckets.get(key)
        if bucket is not None:
            self.buckets.move_to_end(key)
            return bucket
        self._evict_idle(now)
        if len(self.buckets) >= self.max_buckets:
            self.buckets.popitem(last=False)
            self.evicted_in_use += 1
        bucket = TokenBucket(self.spec, now)
        self.buckets[key] = bucket
        return bucket

    def _evict_idle(self, now: float) -> None:
        # Amortised O(1): each new key drops the full buckets at the front, which were used least recently.
        while self.buckets:
            key, oldest = next(iter(self.buckets.items()))
            if not oldest.full(self.spec, now):
                return
            del self.buckets[key]

    def __len__(self) -> int:
        return len(self.buckets)


@dataclass(frozen=True)
class Limited:
    """A refusal: which limit, whose bucket, and how long until a request would pass."""

    scope: str  # PRINCIPAL or SLOT
    key: str
    """The slot, or the caller's subject ("token:bob"): the message and data.principal name it."""
    retry_after_s: float
    spec: BucketSpec

    @property
    def retry_after_ms(self) -> int:
        return max(1, math.ceil(self.retry_after_s * 1000))

    @property
    def retry_after_header(self) -> int:
        """Whole seconds, rounded up (HTTP Retry-After has no fractions); at least 1."""
        return max(1, math.ceil(self.retry_after_s))

    @property
    def limit(self) -> str:
        """The bound's key under [limits], as mcpgw_limit_hits labels it."""
        return f"rate.per_{self.scope}"

    @property
    def setting(self) -> str:
        return f"limits.{self.limit}"

    def message(self) -> str:
        return (
            f'Rate limit exceeded for {self.scope} "{self.key}" ({self.setting}: {self.spec.describe()}); '
            f"retry after {self.retry_after_ms} ms"
        )

    def data(self) -> dict[str, object]:
        return {
            # "rate_limited" tells these token buckets from the execution limits, which answer -32029 too.
            "reason": "rate_limited",
            "retryAfterMs": self.retry_after_ms,
            "scope": self.scope,
            self.scope: self.key,
            "limit": {"ratePerSecond": self.spec.rate_per_s, "burst": self.spec.burst},
            "setting": self.setting,
        }


RateSnapshot = dict[str, tuple[BucketSpec, int, list[tuple[Hashable, TokenBucket, float, float]]]]
"""RateLimiter.snapshot: by scope, the spec, max_buckets and each bucket (least recently used first) with its
tokens and the time it was last brought up to."""


class RateLimiter:
    """The gateway's two kinds of bucket; `admit` takes one token from each that applies, or none."""

    def __init__(
        self,
        per_principal: BucketSpec,
        per_slot: BucketSpec,
        max_buckets: int = 4096,
        clock: Clock = time.monotonic,
    ) -> None:
        self.tables = {
            PRINCIPAL: BucketTable(per_principal, max_buckets),
            SLOT: BucketTable(per_slot, max_buckets),
        }
        self.clock = clock

    @property
    def enabled(self) -> bool:
        return any(table.spec.enabled for table in self.tables.values())

    def reconfigure(self, per_principal: BucketSpec, per_slot: BucketSpec, max_buckets: int) -> None:
        """New rates and bounds (a configuration reload) from the next request on. Buckets are kept: a
        bucket refills to the new burst at the new rate, and a table over its new bound drops the least
        recently used ones."""
        for scope, spec in ((PRINCIPAL, per_principal), (SLOT, per_slot)):
            table = self.tables[scope]
            table.spec = spec
            table.max_buckets = max_buckets
            while len(table.buckets) > max_buckets:
                table.buckets.popitem(last=False)
            for bucket in table.buckets.values():
                bucket.tokens = min(bucket.tokens, float(spec.burst))

    def snapshot(self) -> RateSnapshot:
        """Each table's spec, bound and buckets with what they hold, for `restore` (a refused reload)."""
        return {
            scope: (
                table.spec,
                table.max_buckets,
                [(key, bucket, bucket.tokens, bucket.updated) for key, bucket in table.buckets.items()],
            )
            for scope, table in self.tables.items()
        }

    def restore(self, snapshot: RateSnapshot) -> None:
        """Put back exactly what `snapshot` saw: the same buckets in the same order, holding what they held,
        so a reconfigure taken back neither refills a bucket it dropped nor keeps one it cut down."""
        for scope, (spec, max_buckets, buckets) in snapshot.items():
            table = self.tables[scope]
            table.spec = spec
            table.max_buckets = max_buckets
            table.buckets = OrderedDict()
            for key, bucket, tokens, updated in buckets:
                bucket.tokens, bucket.updated = tokens, updated
                table.buckets[key] = bucket

    def admit(self, principal: Principal | None = None, slot: str | None = None) -> Limited | None:
        """Take one token for the principal and one for the slot (None: that limit does not apply).

        Both are checked before either is taken, so a request refused by one limit costs nothing
        from the other. A principal's bucket is keyed by kind and name (a token "alice" and an
        OAuth subject "alice" are different callers)."""
        now = self.clock()
        wanted: list[tuple[str, BucketTable, TokenBucket]] = []
        asked: tuple[tuple[str, Hashable], ...] = (
            (PRINCIPAL, principal.key if principal is not None else None),
            (SLOT, slot),
        )
        for scope, key in asked:
            table = self.tables[scope]
            if key is None or not table.spec.enabled:
                continue
            bucket = table.bucket(key, now)
            bucket.refill(table.spec, now)
            wanted.append((scope, table, bucket))
        refusals = [
            Limited(scope, named(principal, slot, scope), bucket.wait_s(table.spec), table.spec)
            for scope, table, bucket in wanted
            if bucket.tokens < 1.0
        ]
        if refusals:
            # The longest wait is the one that matters: retrying sooner would be refused again.
            return max(refusals, key=lambda refusal: refusal.retry_after_s)
        for _, _, bucket in wanted:
            bucket.tokens -= 1.0
        return None


def named(principal: Principal | None, slot: str | None, scope: str) -> str:
    """Whose bucket ran dry, as a refusal names it: the slot, or the subject the caller authenticated as
    (token:bob, user:bob, service:bob, anonymous), since one name of three kinds is three callers with
    three buckets. Worked out for a refusal only, not for every request admitted."""
    if scope == PRINCIPAL and principal is not None:
        return caller_name(subjects_of(principal))
    return slot or ""
