"""The reload plan without a gateway: which keys differ, which a reload applies and which refuse it (named,
with their values when they are plain and not secret), how changes are said, and the pure pieces the parts
swap with (rate buckets, connection caps, provider credentials, upstream matching)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from gateway.config import ConnectionLimitsConfig, GatewayConfig, ProviderAuthConfig, StdioUpstreamConfig
from gateway.core.broker import reload_tool
from gateway.core.principal import Principal
from gateway.policy.connection_limits import ConnectionLimiter, Verdict
from gateway.policy.provider_auth import ProviderAuthPolicy, ProviderCredential
from gateway.policy.rate_limit import BucketSpec, RateLimiter
from gateway.reload.diff import changed_paths, keyed_changes, restart_refusal, shown
from gateway.reload.parts.upstreams import describe as describe_upstreams
from gateway.reload.parts.upstreams import diff as upstream_diff
from gateway.reload.plan import unowned_refusals
from gateway.reload.report import ReloadReport
from gateway.telemetry.metrics import Metrics


def config(**values: Any) -> GatewayConfig:
    return GatewayConfig.model_validate(values)


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


# -- which keys differ -----------------------------------------------------------------------


def test_the_deepest_key_that_differs_is_named() -> None:
    old = config()
    new = config(port=3001, limits={"rate": {"per_slot": {"burst": 7}}, "max_sessions": 9})
    assert changed_paths(old, new) == ["port", "limits.max_sessions", "limits.rate.per_slot.burst"]
    assert changed_paths(old, config()) == []


def test_a_list_or_a_table_of_entries_is_one_key() -> None:
    old = config(upstreams={"stdio": [{"name": "a", "command": ["x"]}]}, groups={"g": {}})
    new = config(upstreams={"stdio": [{"name": "a", "command": ["y"]}]}, groups={"g": {}, "h": {}})
    assert changed_paths(old, new) == ["upstreams.stdio", "groups"]


def test_a_secret_read_from_a_file_that_changed_is_a_change(tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_text("first-secret-of-enough-length")
    shared = {"providers": {"auth": {"mode": "shared", "shared_secret": {"file": str(secret)}}}}
    old = config(**shared)
    secret.write_text("second-secret-of-enough-length")
    assert changed_paths(old, config(**shared)) == ["providers.auth.shared_secret"]


# -- what refuses a reload ---------------------------------------------------------------------


def test_a_key_that_cannot_change_is_refused_with_its_values_and_why() -> None:
    assert unowned_refusals(config(port=3000), config(port=3001)) == [
        "port 3000 -> 3001 needs a restart (the listener is bound to it)"
    ]
    assert unowned_refusals(config(), config(limits={"max_sessions": 9})) == [
        "limits.max_sessions 1024 -> 9 needs a restart (it is built into the sessions, streams and parsers at start)"
    ]
    assert unowned_refusals(config(), config(limits={"connections": {"idle_timeout_s": 5.0}})) == [
        "limits.connections.idle_timeout_s 60 -> 5 needs a restart (it is set on the listener when it binds)"
    ]
    assert unowned_refusals(config(), config(groups_separator="-")) == [
        'groups_separator "__" -> "-" needs a restart (tool names at /mcp never change meaning while the gateway runs)'
    ]


def test_keys_a_part_applies_are_not_refused_here() -> None:
    old = config()
    new = config(
        auth={"tokens": [{"name": "a", "sha256": sha("a")}]},
        upstreams={"stdio": [{"name": "files", "command": ["x"]}]},
        groups={"pumps": {"slots": ["pump-*"]}},
        limits={"rate": {"per_slot": {"burst": 3}}, "max_slots": 9, "connections": {"max_per_peer": 3}},
        mdns={"enabled": True},
        logging={"level": "debug"},
        telemetry={"enabled": True},
    )
    assert unowned_refusals(old, new) == []


def test_every_refusal_is_listed_at_once_and_entries_never_show_their_values() -> None:
    new = config(
        mqtt={"brokers": [{"url": "mqtt://broker.lan"}]},
        serial={"ports": [{"path": "/dev/ttyUSB0"}]},
        audit={"max_age_days": 3},
        providers={"takeover": "reject"},
        logging={"format": "json"},
    )
    refusals = unowned_refusals(config(), new)
    assert refusals == [
        'providers.takeover "liveness" -> "reject" needs a restart (it is fixed into each provider session as it '
        "connects)",
        'logging.format "auto" -> "json" needs a restart (the log handler is set up at start)',
        "mqtt.brokers changed, which needs a restart (MQTT broker connections are not reconfigured at run time)",
        "serial.ports changed, which needs a restart (serial ports and hot-plug are not reconfigured at run time)",
        "audit.max_age_days 90 -> 3 needs a restart (the audit trail's database is open and its writer running)",
    ]
    assert not any("broker.lan" in refusal for refusal in refusals)  # an entry's values stay unsaid


def test_a_reload_may_not_open_a_lan_bind() -> None:
    secret = {"name": "line-1", "sha256": sha("s"), "slots": ["pump-*"]}
    closed = {
        "host": "0.0.0.0",
        "public_url": "https://gw.plant.lan:3000",
        "auth": {"tokens": [{"name": "a", "sha256": sha("a")}]},
        "providers": {"auth": {"mode": "identities", "identities": [secret]}},
    }
    open_providers = {**closed, "providers": {"auth": {"mode": "none"}}}
    refusals = unowned_refusals(config(**closed), config(**open_providers))
    assert len(refusals) == 1
    assert refusals[0].startswith("refusing to listen on 0.0.0.0 without provider authentication")


def test_values_of_secret_keys_are_never_shown() -> None:
    assert shown("auth.hmac.keys", "x") is None
    assert shown("telemetry.headers_file", "/etc/otel.headers") is None
    assert shown("port", 3000) == "3000"
    assert shown("limits.rate.per_slot.rate_per_s", 2.5) == "2.5"
    assert shown("mdns.enabled", True) == "true"
    assert shown("public_url", None) == "unset"
    assert restart_refusal("event_loop", config(), config(event_loop="asyncio")) == (
        'event_loop "auto" -> "asyncio" needs a restart (the event loop is chosen at start)'
    )


# -- how changes are said -----------------------------------------------------------------------


def test_a_table_of_entries_says_what_was_added_removed_and_changed() -> None:
    assert keyed_changes("auth.tokens", {"a": 1, "b": 2, "c": 3}, {"a": 1, "b": 9, "d": 4, "e": 5}) == (
        "auth.tokens: added d, e; removed c; changed b"
    )
    assert keyed_changes("auth.tokens", {"a": 1}, {"a": 1}) is None


def test_a_report_is_one_line_for_the_log_and_a_text_for_a_person() -> None:
    applied = ReloadReport(0.0, "applied", "config file g.toml", ("auth.tokens: added b", "groups: removed g"))
    assert applied.line() == "configuration reloaded from config file g.toml: auth.tokens: added b; groups: removed g"
    assert applied.text().splitlines() == [
        "Configuration reloaded from config file g.toml:",
        "  auth.tokens: added b",
        "  groups: removed g",
    ]
    refused = ReloadReport(0.0, "refused", "config file g.toml", refusals=("port 1 -> 2 needs a restart (x)",))
    assert refused.line() == "configuration reload refused, nothing was changed: port 1 -> 2 needs a restart (x)"
    assert refused.to_json()["at"] == "1970-01-01T00:00:00.000Z"


# -- upstreams by name --------------------------------------------------------------------------


@dataclass
class Running:
    name: str
    config: StdioUpstreamConfig


def stdio(name: str, *command: str) -> StdioUpstreamConfig:
    return StdioUpstreamConfig(name=name, command=list(command) or ["server"])


def test_upstreams_are_matched_by_name() -> None:
    running = [Running("keep", stdio("keep")), Running("gone", stdio("gone")), Running("change", stdio("change"))]
    found = upstream_diff(running, [stdio("keep"), stdio("change", "server", "--v2"), stdio("new")])  # type: ignore[arg-type]
    assert [config.name for config in found.added] == ["new"]
    assert [manager.name for manager in found.removed] == ["gone"]
    changed = stdio("change", "server", "--v2")
    assert [(manager.name, config) for manager, config in found.changed] == [("change", changed)]
    assert describe_upstreams(found) == ["upstreams.stdio: added new; removed gone; restarted change"]
    assert not upstream_diff(running, [stdio("keep"), stdio("gone"), stdio("change")])  # type: ignore[arg-type]


# -- what the parts swap with -------------------------------------------------------------------


def test_rate_buckets_take_new_rates_and_bounds_and_keep_what_they_hold() -> None:
    now = [0.0]
    limiter = RateLimiter(BucketSpec(1.0, 5), BucketSpec(1.0, 5), max_buckets=4, clock=lambda: now[0])
    for name in "abcd":
        assert limiter.admit(Principal(name, "token")) is None
    limiter.reconfigure(BucketSpec(1.0, 2), BucketSpec(0.0, 1), max_buckets=2)
    table = limiter.tables["principal"]
    assert len(table) == 2 and all(bucket.tokens <= 2 for bucket in table.buckets.values())
    assert limiter.admit(Principal("d", "token"), "pump-1") is None  # the slot limit is off now
    assert limiter.admit(Principal("d", "token")) is None
    assert limiter.admit(Principal("d", "token")) is not None


def test_connection_caps_apply_to_the_next_connection() -> None:
    limiter = ConnectionLimiter(ConnectionLimitsConfig(max_per_peer=2, per_peer_exempt=[]))
    held = [limiter.open("10.0.0.5"), limiter.open("10.0.0.5")]
    assert all(admission.verdict is Verdict.ADMIT for admission in held)
    limiter.reconfigure(ConnectionLimitsConfig(max_per_peer=1, per_peer_exempt=[]))
    assert limiter.open("10.0.0.5").verdict is Verdict.REFUSE
    limiter.reconfigure(ConnectionLimitsConfig(max_per_peer=1, per_peer_exempt=["10.0.0.0/24"]))
    assert limiter.open("10.0.0.5").verdict is Verdict.ADMIT
    for admission in held:
        limiter.close(admission)
    assert limiter.per_peer == {}


@pytest.mark.parametrize(
    ("before", "after", "identity", "expected"),
    [
        # The same identity with the same secret stands, with its new slot patterns.
        (["a:s1:pump-*"], ["a:s1:tank-*"], "a", ProviderCredential("a", ("tank-*",))),
        (["a:s1:pump-*", "b:s2:*"], ["b:s2:*"], "a", None),  # removed
        (["a:s1:pump-*"], ["a:s9:pump-*"], "a", None),  # its secret changed
        ([], ["a:s1:pump-*"], None, None),  # mode none -> identities: a link without a secret
        (["a:s1:pump-*"], [], "a", ProviderCredential("a")),  # mode identities -> none: anyone may publish
    ],
)
def test_a_provider_credential_stands_or_falls_with_its_identity(
    before: list[str], after: list[str], identity: str | None, expected: ProviderCredential | None
) -> None:
    def policy(entries: list[str]) -> ProviderAuthPolicy:
        identities = [
            {"name": name, "sha256": sha(secret), "slots": [slots]}
            for name, secret, slots in (entry.split(":") for entry in entries)
        ]
        settings = {"mode": "identities", "identities": identities} if identities else {"mode": "none"}
        return ProviderAuthPolicy(ProviderAuthConfig.model_validate(settings), Metrics())

    assert policy(after).standing(policy(before), identity) == expected


@dataclass
class BrokerViewStub:
    config: GatewayConfig
    reloading: object | None = object()


def test_without_a_policy_broker_reload_is_served_only_on_loopback() -> None:
    assert reload_tool.may_call_ungoverned(BrokerViewStub(config())) is None  # type: ignore[arg-type]
    lan = config(host="0.0.0.0", insecure_lan=True)
    assert reload_tool.may_call_ungoverned(BrokerViewStub(lan)) == reload_tool.NOT_ON_THE_NETWORK  # type: ignore[arg-type]
    refusal = reload_tool.may_call_ungoverned(BrokerViewStub(config(), reloading=None))  # type: ignore[arg-type]
    assert refusal is not None and "cannot reload" in refusal
