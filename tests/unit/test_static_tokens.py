"""Static client tokens: configuration, token files, matching, the loopback-unless-TLS rule, and the
pieces of the authentication step that need no server (bearer parsing, scope rules, predicates)."""

from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path
from typing import Any
from unittest import mock

import orjson
import pytest
from aiohttp.test_utils import make_mocked_request
from multidict import CIMultiDict

from gateway.cli import refuse_insecure_bind
from gateway.config import ConfigError, GatewayConfig, load_config
from gateway.core.principal import Principal
from gateway.policy.client_auth import (
    RequiredScopes,
    is_client_path,
    path_slot,
    www_authenticate,
)
from gateway.policy.static_tokens import StaticTokenVerifier
from gateway.policy.token_files import create_token
from gateway.policy.verifier import AuthFailure, Endpoint, bearer_token, is_loopback_peer
from gateway.telemetry.metrics import Metrics

TOKEN = "k4pX9q2bV7mT1zR8sW3yN6cJ0dF5gH2uL8oA1eI4rQ7"
OTHER = "Zr0Wq8Xk3Lm5Nb7Vc9Tf1Gh2Jd4Ks6Pa8Sd0Fg2Hj4L"
ENDPOINT = Endpoint(slot="pump-1", resource="http://127.0.0.1:3000/pump-1/mcp", metadata_url=None, required_scopes=())


def sha(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def config(**auth: Any) -> GatewayConfig:
    return GatewayConfig.model_validate({"auth": auth})


def request(authorization: str | list[str] | None = None, peer: str = "127.0.0.1") -> Any:
    headers: list[tuple[str, str]] = []
    if isinstance(authorization, str):
        headers.append(("Authorization", authorization))
    elif authorization is not None:
        headers += [("Authorization", value) for value in authorization]
    transport = mock.Mock()
    transport.get_extra_info.side_effect = lambda name, default=None: (peer, 40000) if name == "peername" else default
    return make_mocked_request("POST", "/pump-1/mcp", headers=CIMultiDict(headers), transport=transport)


def verifier(cfg: GatewayConfig) -> StaticTokenVerifier:
    built = StaticTokenVerifier.from_config(cfg, Metrics())
    assert built is not None
    return built


# -- configuration ---------------------------------------------------------------------------------


def test_a_token_is_configured_by_hash_env_or_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SCADA_TOKEN", OTHER)
    secret_file = tmp_path / "hmi.token"
    secret_file.write_text("hmi-token-from-a-file-0123456789\n")
    cfg = config(
        tokens=[
            {"name": "ops", "scopes": ["pump-1", "metrics"], "sha256": sha(TOKEN).upper()},
            {"name": "scada", "env": "SCADA_TOKEN"},
            {"name": "hmi", "file": str(secret_file)},
        ]
    )
    assert cfg.auth_configured
    found = verifier(cfg)
    assert found.match(TOKEN) is not None and found.match(TOKEN).principal == Principal(  # type: ignore[union-attr]
        "ops", "token", frozenset({"pump-1", "metrics"})
    )
    assert found.match(OTHER).principal.name == "scada"  # type: ignore[union-attr]
    assert found.match("hmi-token-from-a-file-0123456789").principal.name == "hmi"  # type: ignore[union-attr]
    assert found.match(TOKEN + "x") is None
    assert found.posture() == {"static_tokens": 3}


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"name": "a", "env": "NOT_SET_ANYWHERE_42"}, "NOT_SET_ANYWHERE_42 is not set"),
        ({"name": "a", "file": "/nonexistent/token"}, "not found"),
        ({"name": "a", "sha256": "abc"}, "64 hex digits"),
        ({"name": "a", "sha256": "a" * 64, "env": "X"}, "exactly one of sha256, env or file"),
        ({"name": "a"}, "exactly one of env"),
        ({"name": "bad name", "sha256": "a" * 64}, "auth.tokens.0.name"),
        ({"name": "a", "sha256": "a" * 64, "scopes": ["two words"]}, "auth.tokens.0.scopes.0"),
    ],
)
def test_unusable_token_configuration_stops_the_gateway(tmp_path: Path, entry: dict[str, Any], message: str) -> None:
    # JSON values are valid TOML values, so an inline table is "key = <json>" pairs.
    table = ", ".join(f"{key} = {orjson.dumps(value).decode()}" for key, value in entry.items())
    path = tmp_path / "gateway.toml"
    path.write_text(f"[auth]\ntokens = [{{ {table} }}]\n")
    with pytest.raises(ConfigError) as caught:
        load_config(path, environ={})
    assert message in str(caught.value)
    assert f"config file {path}" in str(caught.value)


def test_two_tokens_with_one_name_or_one_value_are_refused() -> None:
    with pytest.raises(ValueError, match="repeated: ops"):
        config(tokens=[{"name": "ops", "sha256": sha(TOKEN)}, {"name": "ops", "sha256": sha(OTHER)}])
    with pytest.raises(ValueError, match="same token"):
        config(tokens=[{"name": "ops", "sha256": sha(TOKEN)}, {"name": "hmi", "sha256": sha(TOKEN)}])


def test_hashes_are_masked_in_config_show() -> None:
    from gateway.config import masked_dump

    dumped = masked_dump(config(tokens=[{"name": "ops", "sha256": sha(TOKEN)}]))
    assert dumped["auth"]["tokens"][0]["sha256"] == "***"
    assert sha(TOKEN) not in str(dumped)


def test_a_lan_bind_needs_no_insecure_lan_once_authentication_is_configured(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TEST_PROVIDER_SECRET", "s" * 32)
    tokens = {"tokens": [{"name": "a", "sha256": sha(TOKEN)}]}
    shared = {"auth": {"mode": "shared", "shared_secret": {"env": "TEST_PROVIDER_SECRET"}}}
    open_lan = GatewayConfig.model_validate({"host": "0.0.0.0"})
    assert refuse_insecure_bind(open_lan) is not None
    # Client tokens alone are not enough: provider authentication is the other half (tests/unit/test_lan_bind.py).
    assert refuse_insecure_bind(GatewayConfig.model_validate({"host": "0.0.0.0", "auth": tokens})) is not None
    with_both = GatewayConfig.model_validate({"host": "0.0.0.0", "auth": tokens, "providers": shared})
    assert refuse_insecure_bind(with_both) is None
    assert not with_both.lan_without_auth
    # --insecure-lan with both configured is not "insecure": nothing says so.
    flagged = GatewayConfig.model_validate(
        {"host": "0.0.0.0", "insecure_lan": True, "auth": tokens, "providers": shared}
    )
    assert not flagged.lan_without_auth


# -- token files -----------------------------------------------------------------------------------


def test_token_files_are_read_and_reloaded_when_they_change(tmp_path: Path) -> None:
    path = tmp_path / "tokens.toml"
    first = create_token(path, "scada", ["pump-1"])
    now = [0.0]
    found = StaticTokenVerifier([], [path], tls=False, clock=lambda: now[0])
    assert found.match(first) is not None

    second = create_token(path, "hmi", ["pump-2"])
    found.reload_if_changed()  # within the check interval: not looked at yet
    assert found.match(second) is None
    now[0] += 1.5
    found.reload_if_changed()
    assert found.match(second).principal == Principal("hmi", "token", frozenset({"pump-2"}))  # type: ignore[union-attr]

    # A broken edit keeps the tokens the file had; a deleted file revokes them.
    path.write_text("[[tokens]]\nname = \n")
    now[0] += 1.5
    found.reload_if_changed()
    assert found.match(second) is not None
    path.unlink()
    now[0] += 1.5
    found.reload_if_changed()
    assert found.match(first) is None and found.match(second) is None


def test_a_same_size_edit_whose_mtime_is_set_back_is_picked_up(tmp_path: Path) -> None:
    # cp -p, rsync -t and touch -r restore the modification time; with the size and inode unchanged only
    # the change time (which no user can set) tells that the content changed.
    path = tmp_path / "tokens.toml"
    bob = create_token(path, "bob", ["pump-1"])
    now = [0.0]
    found = StaticTokenVerifier([], [path], tls=False, clock=lambda: now[0])
    before = path.stat()
    time.sleep(0.05)  # past the kernel's timestamp granularity, so the write's change time differs
    with path.open("r+") as handle:
        text = handle.read()
        handle.seek(0)
        handle.write(text.replace('scopes = ["pump-1"]', 'scopes = ["pump-2"]'))
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    after = path.stat()
    assert (after.st_ino, after.st_size, after.st_mtime_ns) == (before.st_ino, before.st_size, before.st_mtime_ns)
    now[0] += 1.5
    found.reload_if_changed()
    assert found.match(bob).principal.scopes == frozenset({"pump-2"})  # type: ignore[union-attr]


def test_a_token_file_others_can_write_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "tokens.toml"
    create_token(path, "scada", [])
    os.chmod(path, 0o666)
    with pytest.raises(ConfigError, match="chmod 600"):
        StaticTokenVerifier.from_config(config(token_files=[str(path)]), Metrics())


def test_a_missing_token_file_stops_the_gateway_with_directions(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="mcp-gateway token create"):
        StaticTokenVerifier.from_config(config(token_files=[str(tmp_path / "none.toml")]), Metrics())


def test_a_name_in_both_the_config_and_a_token_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "tokens.toml"
    create_token(path, "scada", [])
    with pytest.raises(ConfigError, match="'scada' is used in both config and"):
        StaticTokenVerifier.from_config(
            config(tokens=[{"name": "scada", "sha256": sha(TOKEN)}], token_files=[str(path)]), Metrics()
        )


# -- the loopback-unless-TLS rule ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("remote", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.8.9.10", True),
        ("::1", True),
        ("::ffff:127.0.0.1", True),
        ("192.0.2.2", False),
        ("::ffff:192.0.2.2", False),
        ("fe80::1%eth0", False),
        ("fd00::2", False),
        (None, False),
        ("", False),
        ("not-an-address", False),
    ],
)
def test_loopback_peers(remote: str | None, loopback: bool) -> None:
    assert is_loopback_peer(remote) is loopback


async def test_a_static_token_from_another_machine_needs_tls() -> None:
    cfg = config(tokens=[{"name": "ops", "sha256": sha(TOKEN)}])
    plain = verifier(cfg)
    refused = await plain.verify(request(f"Bearer {TOKEN}", peer="192.0.2.7"), TOKEN, ENDPOINT)
    assert isinstance(refused, AuthFailure) and refused.reason == "not_tls"
    assert TOKEN not in refused.description
    assert await plain.verify(request(f"Bearer {TOKEN}"), TOKEN, ENDPOINT) == Principal("ops", "token")
    with_tls = StaticTokenVerifier(plain.configured, [], tls=True)
    assert await with_tls.verify(request(f"Bearer {TOKEN}", peer="192.0.2.7"), TOKEN, ENDPOINT) == Principal(
        "ops", "token"
    )
    # An unknown token is not this verifier's to refuse: the chain goes on (and ends with 401 invalid).
    assert await plain.verify(request("Bearer nope"), "nope", ENDPOINT) is None


def lan_request(peer: str, local: str) -> Any:
    """A request on a connection from `peer` to the listener's address `local`."""
    transport = mock.Mock()
    names = {"peername": (peer, 40000), "sockname": (local, 3000)}
    transport.get_extra_info.side_effect = lambda name, default=None: names.get(name, default)
    headers = CIMultiDict([("Authorization", f"Bearer {TOKEN}")])
    return make_mocked_request("POST", "/pump-1/mcp", headers=headers, transport=transport)


@pytest.mark.parametrize(
    ("peer", "local", "accepted"),
    [
        ("192.0.2.2", "192.0.2.2", True),  # this machine, calling the LAN address the gateway is bound to
        ("::ffff:192.0.2.2", "192.0.2.2", True),
        ("fd00::2", "fd00::2", True),
        ("192.0.2.7", "192.0.2.2", False),  # another machine
        ("fd00::7", "fd00::2", False),
    ],
)
async def test_a_static_token_from_the_listeners_own_address_is_from_this_machine(
    peer: str, local: str, accepted: bool
) -> None:
    plain = verifier(config(tokens=[{"name": "ops", "sha256": sha(TOKEN)}]))
    verdict = await plain.verify(lan_request(peer, local), TOKEN, ENDPOINT)
    if accepted:
        assert verdict == Principal("ops", "token")
    else:
        assert isinstance(verdict, AuthFailure) and verdict.reason == "not_tls"


# -- the authentication step's pure parts ----------------------------------------------------------


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        (None, None),
        (f"Bearer {TOKEN}", TOKEN),
        (f"bearer   {TOKEN}  ", TOKEN),
        ("Basic dXNlcjpwYXNz", None),  # another scheme: another verifier's business
        ("Bearer", "malformed"),
        ("Bearer two words", "malformed"),
        ('Bearer "quoted"', "malformed"),
        ("Bearer " + "a" * 20_000, "malformed"),
        ([f"Bearer {TOKEN}", f"Bearer {OTHER}"], "malformed"),
    ],
)
def test_bearer_token_comes_only_from_one_authorization_header(header: Any, expected: str | None) -> None:
    found = bearer_token(request(header))
    if expected == "malformed":
        assert isinstance(found, AuthFailure) and found.reason == "malformed"
        assert TOKEN not in found.description
    else:
        assert found == expected


def test_a_token_in_the_query_string_is_not_a_credential() -> None:
    mocked = make_mocked_request("POST", f"/pump-1/mcp?access_token={TOKEN}")
    assert bearer_token(mocked) is None


def test_required_scopes_exact_key_wins_then_first_pattern_in_file_order() -> None:
    rules = RequiredScopes({"pump-*": ["pumps"], "pump-1": ["pump-1"], "*": ["plant"], "pump-2?": ["late"]})
    assert rules.for_slot("pump-1") == ("pump-1",)
    assert rules.for_slot("pump-2") == ("pumps",)
    assert rules.for_slot("pump-21") == ("pumps",)  # "pump-*" comes before "pump-2?"
    assert rules.for_slot("tank-1") == ("plant",)
    assert rules.for_slot("_all") == ("plant",)
    assert rules.for_slot(None) == ()
    assert RequiredScopes({}).for_slot("pump-1") == ()


@pytest.mark.parametrize(
    ("path", "client", "slot"),
    [
        ("/pump-1/mcp", True, "pump-1"),
        ("/_all/mcp", True, "_all"),
        ("/_broker/mcp", True, "_broker"),
        ("/pump%2F1/mcp", True, "pump/1"),
        ("/pump-1/sse", True, "pump-1"),  # the other ways in are covered without being listed
        ("/pump-1/messages", True, "pump-1"),
        ("/pump-1", True, "pump-1"),
        ("/", True, None),
        ("/provider/pump-1", False, "provider"),
        ("/providers", False, "providers"),
        ("/healthz", False, "healthz"),
        ("/readyz", False, "readyz"),
        ("/metrics", False, "metrics"),
        ("/.well-known/oauth-protected-resource/pump-1/mcp", False, ".well-known"),
    ],
)
def test_which_paths_are_client_ways_in(path: str, client: bool, slot: str | None) -> None:
    assert is_client_path(path) is client
    assert path_slot(path) == slot
    # Those paths answer GET only; any other method reaches the client routes (slot "provider", ...).
    assert is_client_path(path, "POST") is True
    assert is_client_path(path, "HEAD") is client


def test_www_authenticate_headers() -> None:
    meta = "http://gw:3000/.well-known/oauth-protected-resource/pump-1/mcp"
    assert www_authenticate(resource_metadata=meta) == f'Bearer resource_metadata="{meta}"'
    assert www_authenticate(resource_metadata=None) == 'Bearer realm="mcp-gateway"'
    assert (
        www_authenticate(
            resource_metadata=meta, error="insufficient_scope", description='needs "pump-2"\n', scope="pump-2"
        )
        == f'Bearer error="insufficient_scope", error_description="needs \'pump-2\'?", scope="pump-2", '
        f'resource_metadata="{meta}"'
    )


def test_a_configured_token_a_client_could_not_send_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PASSPHRASE_TOKEN", "correct horse battery staple!")
    with pytest.raises(ValueError, match="RFC 6750"):
        config(tokens=[{"name": "a", "env": "PASSPHRASE_TOKEN"}])


def test_diagnosis_warns_about_static_tokens_on_the_network_without_tls() -> None:
    from gateway.core.broker.diagnose import diagnose
    from gateway.core.broker.problems import GatewayView

    def ids(**view: Any) -> set[str]:
        base: dict[str, Any] = {"url": "http://192.0.2.2:3000", "host": "192.0.2.2", "is_loopback": False}
        return {problem.id for problem in diagnose(GatewayView(**{**base, "insecure_lan": False, **view}))}

    assert "security.static_tokens_without_tls" in ids(static_tokens=2)
    assert "security.static_tokens_without_tls" not in ids(static_tokens=2, tls=True)
    assert "security.static_tokens_without_tls" not in ids(static_tokens=0)
    assert "security.static_tokens_without_tls" not in ids(static_tokens=2, is_loopback=True, host="127.0.0.1")
