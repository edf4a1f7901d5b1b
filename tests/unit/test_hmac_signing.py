"""HMAC-SHA256 request signing: the canonical string, the checks, the skew window and replay cache."""

from __future__ import annotations

import hashlib
import hmac

import pytest

from gateway.config import ConfigError, load_config
from gateway.core.principal import Principal
from gateway.policy import hmac_signing as hs

SECRET = b"0123456789abcdef0123456789abcdef"
NOW = 1_750_000_000.0
BRIDGE = Principal("desktop-bridge", "hmac", frozenset({"pumps"}))


def checker(max_skew_s: float = 60, nonce_cache: int = 1000) -> hs.SignatureChecker:
    return hs.SignatureChecker([hs.SigningKey("bridge-1", SECRET, BRIDGE)], max_skew_s, nonce_cache)


def signed(
    body: bytes = b"{}", *, now: float = NOW, nonce: str | None = None, path: str = "/pump-1/mcp"
) -> dict[str, str]:
    return hs.sign("bridge-1", SECRET, "POST", path, body, now=now, nonce=nonce)


def test_the_canonical_string_is_the_documented_five_lines() -> None:
    body = b'{"jsonrpc":"2.0","id":1,"method":"ping"}'
    canonical = hs.canonical_string("post", "/pump-1/mcp", "1750000000", "n0nce-n0nce-n0nce", body)
    assert canonical == (
        b"POST\n/pump-1/mcp\n1750000000\nn0nce-n0nce-n0nce\n" + hashlib.sha256(body).hexdigest().encode()
    )
    # Anyone can reproduce the signature with a stock HMAC library.
    headers = hs.sign("bridge-1", SECRET, "POST", "/pump-1/mcp", body, now=NOW, nonce="n0nce-n0nce-n0nce")
    assert headers == {
        "X-MCPGW-Key-Id": "bridge-1",
        "X-MCPGW-Timestamp": "1750000000",
        "X-MCPGW-Nonce": "n0nce-n0nce-n0nce",
        "X-MCPGW-Signature": hmac.new(SECRET, canonical, hashlib.sha256).hexdigest(),
    }
    # An empty body (GET, DELETE) hashes b"".
    assert hs.canonical_string("GET", "/_all/mcp", "1", "x" * 16, b"").endswith(
        b"e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
    )


def test_fresh_nonces_are_long_random_and_url_safe() -> None:
    nonces = {hs.new_nonce() for _ in range(200)}
    assert len(nonces) == 200
    assert all(len(nonce) == 24 and nonce.replace("-", "").replace("_", "").isalnum() for nonce in nonces)


def test_a_good_signature_names_the_caller_once() -> None:
    check = checker()
    headers = signed()
    assert check.check("POST", "/pump-1/mcp", headers, b"{}", NOW + 5) == BRIDGE
    replay = check.check("POST", "/pump-1/mcp", headers, b"{}", NOW + 6)
    assert isinstance(replay, hs.Refusal)
    assert replay.reason == "replayed" and replay.status == 401
    assert replay.description.startswith("replayed request")
    # The next request with its own nonce passes.
    assert check.check("POST", "/pump-1/mcp", signed(), b"{}", NOW + 6) == BRIDGE


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [("GET", "/pump-1/mcp", b"{}"), ("POST", "/pump-2/mcp", b"{}"), ("POST", "/pump-1/mcp", b'{"x":1}')],
)
def test_changing_what_was_signed_breaks_the_signature(method: str, path: str, body: bytes) -> None:
    refusal = checker().check(method, path, signed(), body, NOW)
    assert isinstance(refusal, hs.Refusal) and refusal.reason == "bad_signature"
    assert "docs/security-auth.md" in refusal.description


def test_another_secret_or_a_tampered_header_is_refused() -> None:
    forged = hs.sign("bridge-1", b"another secret of enough length!", "POST", "/pump-1/mcp", b"{}", now=NOW)
    refusal = checker().check("POST", "/pump-1/mcp", forged, b"{}", NOW)
    assert isinstance(refusal, hs.Refusal) and refusal.reason == "bad_signature"
    moved = {**signed(), "X-MCPGW-Timestamp": str(int(NOW) + 1)}
    refusal = checker().check("POST", "/pump-1/mcp", moved, b"{}", NOW)
    assert isinstance(refusal, hs.Refusal) and refusal.reason == "bad_signature"


@pytest.mark.parametrize(("offset", "direction"), [(-61, "behind"), (75, "ahead of")])
def test_a_timestamp_outside_the_window_is_refused_naming_the_skew(offset: int, direction: str) -> None:
    headers = signed(now=NOW + offset)
    refusal = checker().check("POST", "/pump-1/mcp", headers, b"{}", NOW)
    assert isinstance(refusal, hs.Refusal) and refusal.reason == "clock_skew" and refusal.status == 401
    assert f"{abs(offset)} s {direction} the gateway's clock" in refusal.description
    assert "auth.hmac.max_skew_s" in refusal.description
    # The edge of the window is still inside it.
    assert checker().check("POST", "/pump-1/mcp", signed(now=NOW - 60), b"{}", NOW) == BRIDGE


def test_a_nonce_is_remembered_exactly_as_long_as_its_request_could_be_accepted() -> None:
    check = checker(max_skew_s=60)
    headers = signed(now=NOW)
    assert check.check("POST", "/pump-1/mcp", headers, b"{}", NOW) == BRIDGE
    late = check.check("POST", "/pump-1/mcp", headers, b"{}", NOW + 60)
    assert isinstance(late, hs.Refusal) and late.reason == "replayed"
    # Once the timestamp is out of the window the skew check refuses it, and the nonce is forgotten.
    expired = check.check("POST", "/pump-1/mcp", headers, b"{}", NOW + 61)
    assert isinstance(expired, hs.Refusal) and expired.reason == "clock_skew"
    assert not check.nonces.seen(("bridge-1", headers["X-MCPGW-Nonce"]), NOW + 61)


def test_a_full_nonce_cache_refuses_rather_than_forgets() -> None:
    check = checker(nonce_cache=3)
    for _ in range(3):
        assert check.check("POST", "/pump-1/mcp", signed(), b"{}", NOW) == BRIDGE
    full = check.check("POST", "/pump-1/mcp", signed(), b"{}", NOW)
    assert isinstance(full, hs.Refusal) and full.reason == "nonce_cache_full" and full.status == 503
    assert "auth.hmac.nonce_cache" in full.description
    # When the first nonces leave the window, room comes back.
    assert check.check("POST", "/pump-1/mcp", signed(now=NOW + 61), b"{}", NOW + 61) == BRIDGE


def test_unsigned_requests_are_not_the_signature_checkers_business() -> None:
    assert not hs.SignatureChecker.is_signed({"Authorization": "Bearer x"})
    assert hs.SignatureChecker.is_signed({"X-MCPGW-Nonce": "x"})


@pytest.mark.parametrize(
    ("headers", "reason", "needle"),
    [
        ({"X-MCPGW-Key-Id": "bridge-1"}, "malformed", "missing: X-MCPGW-Timestamp, X-MCPGW-Nonce, X-MCPGW-Signature"),
        ({"X-MCPGW-Key-Id": "nobody"}, "invalid", "not known"),
        ({"X-MCPGW-Timestamp": "12.5"}, "malformed", "whole Unix seconds"),
        ({"X-MCPGW-Nonce": "short"}, "malformed", "16 to 128"),
        ({"X-MCPGW-Nonce": "has spaces in it, sixteen+"}, "malformed", "16 to 128"),
        ({"X-MCPGW-Signature": "A" * 64}, "malformed", "lower-case hex"),
    ],
)
def test_malformed_or_unknown_signing_headers_are_refused_without_echoing_them(
    headers: dict[str, str], reason: str, needle: str
) -> None:
    sent = {**signed(), **headers}
    if reason == "malformed" and "missing" in needle:
        sent = headers
    refusal = checker().check("POST", "/pump-1/mcp", sent, b"{}", NOW)
    assert isinstance(refusal, hs.Refusal) and refusal.reason == reason
    assert needle in refusal.description
    if "X-MCPGW-Signature" in sent:
        assert sent["X-MCPGW-Signature"] not in refusal.description


def test_hmac_keys_load_fail_closed(tmp_path: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    key_file = tmp_path / "bridge.key"  # type: ignore[operator]
    key_file.write_text(SECRET.decode() + "\n")
    monkeypatch.setenv("BRIDGE_2_SECRET", "z" * 40)
    config = load_config(
        environ={},
        flags={
            "auth.hmac": {
                "keys": [
                    {"key_id": "bridge-1", "file": str(key_file), "principal": "desktop", "scopes": ["pumps"]},
                    {"key_id": "bridge-2", "env": "BRIDGE_2_SECRET"},
                ]
            }
        },
    )
    assert config.auth_configured
    hmac_config = config.auth.hmac
    assert hmac_config is not None and hmac_config.max_skew_s == 60 and hmac_config.nonce_cache == 65536
    first, second = hmac_config.keys
    assert first.secret.get_secret_value() == SECRET.decode() and first.principal_name == "desktop"
    assert second.principal_name == "bridge-2"
    with pytest.raises(ConfigError, match="not found"):
        load_config(environ={}, flags={"auth.hmac": {"keys": [{"key_id": "k", "file": "/nonexistent/key"}]}})
    with pytest.raises(ConfigError, match="shorter than 16"):
        monkeypatch.setenv("SHORT_SECRET", "tiny")
        load_config(environ={}, flags={"auth.hmac": {"keys": [{"key_id": "k", "env": "SHORT_SECRET"}]}})
    with pytest.raises(ConfigError, match="unique"):
        load_config(
            environ={},
            flags={"auth.hmac": {"keys": [{"key_id": "k", "env": "BRIDGE_2_SECRET"}] * 2}},
        )
    with pytest.raises(ConfigError, match=r"auth\.hmac\.keys"):
        load_config(environ={}, flags={"auth.hmac": {"keys": []}})


def test_the_skew_window_is_judged_in_whole_seconds_and_names_the_real_difference() -> None:
    check = checker(max_skew_s=60)
    # The gateway's clock part-way into a second: exactly 60 s either way is inside, 61 s is not.
    now = NOW + 0.9
    assert check.check("POST", "/pump-1/mcp", signed(now=NOW - 60), b"{}", now) == BRIDGE
    assert check.check("POST", "/pump-1/mcp", signed(now=NOW + 60), b"{}", now) == BRIDGE
    ahead = check.check("POST", "/pump-1/mcp", signed(now=NOW + 61), b"{}", now)
    assert isinstance(ahead, hs.Refusal) and ahead.reason == "clock_skew"
    assert ahead.description.startswith("The request's timestamp is 61 s ahead of the gateway's clock; at most 60 s")
    behind = check.check("POST", "/pump-1/mcp", signed(now=NOW - 61), b"{}", now)
    assert isinstance(behind, hs.Refusal) and "61 s behind" in behind.description


def test_a_full_replay_cache_is_temporarily_unavailable() -> None:
    check = checker(nonce_cache=1)
    assert check.check("POST", "/pump-1/mcp", signed(), b"{}", NOW) == BRIDGE
    full = check.check("POST", "/pump-1/mcp", signed(), b"{}", NOW)
    assert isinstance(full, hs.Refusal)
    assert (full.reason, full.status, full.error) == ("nonce_cache_full", 503, "temporarily_unavailable")


def test_a_request_signed_before_the_gateway_started_is_refused() -> None:
    check = hs.SignatureChecker([hs.SigningKey("bridge-1", SECRET, BRIDGE)], 60, 1000, since=NOW + 0.5)
    early = check.check("POST", "/pump-1/mcp", signed(now=NOW - 1), b"{}", NOW + 1)
    assert isinstance(early, hs.Refusal) and early.reason == "signed_before_start"
    assert early.description.startswith(hs.SIGNED_BEFORE_START) and "Sign it again" in early.description
    # Whole seconds: the second the gateway started in is accepted.
    assert check.check("POST", "/pump-1/mcp", signed(now=NOW), b"{}", NOW + 1) == BRIDGE


def test_saved_nonces_are_restored_without_expired_ones_and_within_the_bound() -> None:
    check = checker()
    headers = signed()
    assert check.check("POST", "/pump-1/mcp", headers, b"{}", NOW) == BRIDGE
    saved = check.nonces.live(NOW + 1)
    assert saved == [("bridge-1", headers["X-MCPGW-Nonce"], NOW + 61)]
    after_restart = checker(nonce_cache=2)
    expired = ("bridge-1", "x" * 16, NOW - 5)
    others = [("bridge-1", f"{'y' * 16}{index}", NOW + 10) for index in range(3)]
    assert after_restart.nonces.restore([*saved, expired, *others], NOW + 1) == 2  # the bound holds
    replay = after_restart.check("POST", "/pump-1/mcp", headers, b"{}", NOW + 2)
    assert isinstance(replay, hs.Refusal) and replay.reason == "replayed"


def test_only_nonces_signed_since_the_start_are_restored_so_a_busy_cache_does_not_refuse_after_a_restart() -> None:
    # Started at NOW + 30: what was signed before it is refused by the start-time rule and needs no
    # nonce; one signed by a clock running ahead does; one expiring later than a request signed now
    # could (the clock ran far ahead at the stop) does not.
    after_restart = hs.SignatureChecker([hs.SigningKey("bridge-1", SECRET, BRIDGE)], 60, 2, since=NOW + 30)
    before_start = [("bridge-1", f"{'b' * 16}{index}", NOW + 29 + 61) for index in range(5)]
    ahead = ("bridge-1", "a" * 16, NOW + 40 + 61)
    a_day_ahead = ("bridge-1", "d" * 16, NOW + 86_400 + 61)
    assert after_restart.restore([*before_start, ahead, a_day_ahead], NOW + 31) == 1
    assert after_restart.nonces.live(NOW + 31) == [ahead]
    fresh = after_restart.check("POST", "/pump-1/mcp", signed(now=NOW + 31), b"{}", NOW + 31)
    assert fresh == BRIDGE  # room in the cache of two


@pytest.mark.parametrize(
    ("text", "secret"),
    [
        ("\ufeffs3cret-s3cret-s3cret\n", "s3cret-s3cret-s3cret"),
        ("  s3cret-s3cret-s3cret\r\n\n", "s3cret-s3cret-s3cret"),
    ],
)
def test_a_secret_file_may_start_with_a_bom_and_end_with_blank_lines(text: str, secret: str) -> None:
    from gateway.config.auth import secret_from_text

    assert secret_from_text(text, "f") == secret


def test_a_secret_file_with_two_lines_or_none_is_refused() -> None:
    from gateway.config.auth import secret_from_text

    with pytest.raises(ValueError, match="f holds 2 non-empty lines; put the secret alone on one line"):
        secret_from_text("first-part-of-it\nsecond-part-of-it\n", "f")
    with pytest.raises(ValueError, match="f is empty"):
        secret_from_text("\ufeff\n  \n", "f")
