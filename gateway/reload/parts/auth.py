"""[auth] at run time: static tokens, token files, OAuth settings, signing keys and required scopes.

Each kind of credential keeps its verifier while its settings are unchanged (an OAuth verifier keeps its
fetched keys, the signing verifier its replay cache); a changed kind gets a new verifier, built and
checked (token files read) before anything is swapped. A new signing verifier takes over the replay
cache, so a captured request cannot be replayed across a reload. A new OAuth verifier whose key source
(jwks_url or jwks_file, and algorithms) is unchanged starts with the keys the old one holds, and with
their refresh schedule (when they were fetched, when a fetch last failed), so a reload while the
authorization server is unreachable does not leave every access token without keys, and a reload
never postpones the next fetch.
With [auth] unchanged its files are still read again, so a token file a start would refuse (writable by
others, say) refuses the reload.

What needs a restart: turning client authentication on or off (the entry gate is built with or without
the step), adding or removing [auth.oauth] (its metadata routes are registered at start), and widening
auth.hmac.max_skew_s (the replay cache forgets nonces by the window they were seen under).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gateway.config import ConfigError, GatewayConfig
from gateway.policy.client_auth import CLIENT_AUTH_KEY, VERIFIER_FACTORIES, ClientAuth, check_client_auth
from gateway.policy.hmac_auth import HmacVerifier
from gateway.policy.oauth import OAuthVerifier
from gateway.policy.verifier import Verifier
from gateway.reload.context import Context, Prepared
from gateway.reload.diff import keyed_changes, scalar_changes
from gateway.reload.report import Refused

OWNS = ("auth",)

SETTINGS_OF: dict[str, Callable[[GatewayConfig], Any]] = {
    "token": lambda config: (config.auth.tokens, config.auth.token_files),
    "oauth": lambda config: config.auth.oauth,
    "hmac": lambda config: config.auth.hmac,
}
"""The settings each kind of verifier is built from: equal settings, same verifier."""


class AuthSwap(Prepared):
    def __init__(
        self,
        changes: list[str],
        step: ClientAuth,
        config: GatewayConfig,
        verifiers: list[Verifier],
        started: list[Verifier],
        carried: list[tuple[HmacVerifier, HmacVerifier]],
        adopted: list[tuple[OAuthVerifier, OAuthVerifier]] | None = None,
    ) -> None:
        super().__init__(changes)
        self.step = step
        self.config = config
        self.verifiers = verifiers
        self.started = started
        self.carried = carried
        self.adopted = adopted or []
        """(new, old) OAuth verifiers: the new one starts with the old one's keys (JwksCache.adopt)."""
        self.dropped = [verifier for verifier in step.verifiers if verifier not in verifiers]
        self.previous: tuple[GatewayConfig, list[Verifier]] | None = None
        self.bounds: list[tuple[HmacVerifier, int]] = []
        """The replay caches' bounds before the swap (an undo puts them back)."""

    def swap(self) -> None:
        self.previous = (self.step.config, self.step.verifiers)
        for fresh, previous in self.carried:
            # The nonces seen so far stay refused; the new bound applies from now on.
            size = fresh.checker.nonces.max_entries
            self.bounds.append((previous, previous.checker.nonces.max_entries))
            fresh.checker.nonces = previous.checker.nonces
            fresh.checker.nonces.max_entries = size
        for fresh_oauth, previous_oauth in self.adopted:
            # At the swap, not at prepare: the keys the old verifier holds now, its latest refresh included,
            # with the times the schedule counts from (settle starts the new one's refresh loop after).
            fresh_oauth.keys.adopt(previous_oauth.keys)
        self.step.swap(self.config, self.verifiers)

    def undo(self) -> None:
        for previous, size in self.bounds:
            previous.checker.nonces.max_entries = size  # nonces seen meanwhile stay refused
        self.bounds = []
        if self.previous is not None and self.step.config is not self.previous[0]:
            self.step.swap(*self.previous)

    async def settle(self) -> list[str]:
        for verifier in self.started:
            await verifier.start()
        for verifier in self.dropped:
            await verifier.close()
        return []


def refusals(old: GatewayConfig, new: GatewayConfig) -> list[str]:
    found = []
    if old.auth.configured != new.auth.configured:
        found.append(
            "auth: turning client authentication on or off needs a restart (the entry gate is built with or "
            "without it at start)"
        )
    elif (old.auth.oauth is None) != (new.auth.oauth is None):
        found.append("auth.oauth: adding or removing OAuth needs a restart (its metadata routes are made at start)")
    before, after = old.auth.hmac, new.auth.hmac
    if before is not None and after is not None and after.max_skew_s > before.max_skew_s:
        found.append(
            f"auth.hmac.max_skew_s {before.max_skew_s:g} -> {after.max_skew_s:g}: widening it needs a restart "
            "(nonces seen are forgotten by the window they arrived under, so a request could be replayed)"
        )
    return found


def describe(old: GatewayConfig, new: GatewayConfig) -> list[str]:
    before, after = old.auth, new.auth
    found = [
        keyed_changes(
            "auth.tokens",
            {token.name: (token.digest, tuple(token.scopes)) for token in before.tokens},
            {token.name: (token.digest, tuple(token.scopes)) for token in after.tokens},
        ),
        keyed_changes(
            "auth.token_files",
            {path: None for path in before.token_files},
            {path: None for path in after.token_files},
        ),
        keyed_changes("auth.required_scopes", before.required_scopes, after.required_scopes),
    ]
    lines = [line for line in found if line is not None]
    if _scopes_reordered(old, new):
        lines.append("auth.required_scopes: patterns reordered")
    lines += scalar_changes("auth.oauth", before.oauth, after.oauth)
    if before.hmac != after.hmac and before.hmac is not None and after.hmac is not None:
        keys = keyed_changes(
            "auth.hmac.keys",
            {key.key_id: key for key in before.hmac.keys},
            {key.key_id: key for key in after.hmac.keys},
        )
        lines += [keys] if keys else []
        lines += [line for line in scalar_changes("auth.hmac", before.hmac, after.hmac) if ".keys" not in line]
    elif before.hmac != after.hmac:
        lines.append("auth.hmac " + ("added" if after.hmac is not None else "removed"))
    return lines or ["auth changed"]


def prepare(old: GatewayConfig, new: GatewayConfig, context: Context) -> Prepared | None:
    if old.auth == new.auth and not _scopes_reordered(old, new):
        if new.auth.configured:
            # Token and key files change without the configuration (chmod 666 tokens.toml): read them as a
            # start and `config check` do, so what they would refuse refuses the reload too, by the same words.
            try:
                check_client_auth(new)
            except ConfigError as exc:
                raise Refused(str(exc)) from exc
        return None
    problems = refusals(old, new)
    if problems:
        raise Refused(*problems)
    step = context.running.app.get(CLIENT_AUTH_KEY)
    if step is None:  # no client authentication at start, and none now (turning it on was refused above)
        return None
    current = {verifier.kind: verifier for verifier in step.verifiers}
    metrics = context.running.gateway.metrics
    verifiers: list[Verifier] = []
    started: list[Verifier] = []
    carried: list[tuple[HmacVerifier, HmacVerifier]] = []
    adopted: list[tuple[OAuthVerifier, OAuthVerifier]] = []
    for factory in VERIFIER_FACTORIES:
        try:
            fresh = factory(new, metrics)  # token files are read here: one that cannot be used refuses
        except ConfigError as exc:
            raise Refused(str(exc)) from exc
        if fresh is None:
            continue
        previous = current.get(fresh.kind)
        settings = SETTINGS_OF.get(fresh.kind)
        if previous is not None and settings is not None and settings(old) == settings(new):
            verifiers.append(previous)
            continue
        verifiers.append(fresh)
        started.append(fresh)
        if isinstance(fresh, HmacVerifier) and isinstance(previous, HmacVerifier):
            carried.append((fresh, previous))
        if isinstance(fresh, OAuthVerifier) and isinstance(previous, OAuthVerifier):
            adopted.append((fresh, previous))
    return AuthSwap(describe(old, new), step, new, verifiers, started, carried, adopted)


def _scopes_reordered(old: GatewayConfig, new: GatewayConfig) -> bool:
    """The same required_scopes in another order: equal as tables, yet the first matching pattern in file
    order decides a slot's scopes, so the order is part of what they mean."""
    before, after = old.auth.required_scopes, new.auth.required_scopes
    return before == after and list(before) != list(after)
