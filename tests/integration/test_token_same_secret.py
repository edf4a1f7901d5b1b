"""One secret under two names across two token files (an entry copied by hand under another name, with
more scopes): the running gateway refuses the copy's file, broker_diagnose's fix says to remove both
names, `token revoke` of one name exits 1 while the secret is still accepted under the other, and once
both are removed the secret is refused (docs/security-auth.md, "Listing and revoking")."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gateway.core.broker.problems import STANDING
from gateway.policy.token_files import create_token, read_token_file
from tests.conftest import GatewayFactory
from tests.integration.test_token_file_unusable import accepted, eventually, unusable
from tests.support.gateway_process import run_cli

TOKEN_FILE_UNUSABLE = "auth.token_file_unusable"


@pytest.mark.timeout(120)
async def test_revoking_one_name_of_a_shared_secret_is_not_reported_done_while_the_other_lets_it_in(
    gateway_factory: GatewayFactory, tmp_path: Path
) -> None:
    first, second = tmp_path / "tokens.toml", tmp_path / "tokens2.toml"
    alice = create_token(first, "alice", ["pump-1"])
    bob = create_token(second, "bob", ["pump-1"])
    config = tmp_path / "gw.toml"
    config.write_text(f'[auth]\ntoken_files = ["{first}", "{second}"]\n')
    auth: dict[str, Any] = {"token_files": [str(first), str(second)]}
    gateway = await gateway_factory(auth=auth)
    try:
        (entry,) = read_token_file(first)
        with second.open("a") as handle:  # the hand-made copy: alice's secret, one more scope
            handle.write(f'\n[[tokens]]\nname = "alice2"\nscopes = ["pump-1", "pump-2"]\nsha256 = "{entry.sha256}"\n')

        async def shown() -> bool:
            return bool(await unusable(gateway.url, bob))

        await eventually(shown, "auth.token_file_unusable not shown")
        (problem,) = await unusable(gateway.url, bob)
        assert "are the same token" in problem["evidence"]
        assert "removing either name leaves the token accepted under the other" in problem["fix"]
        assert "To withdraw it, remove both" in problem["fix"]

        code, out, err = await run_cli("token", "revoke", "alice", "--config", str(config))
        assert (code, out) == (1, ""), err
        assert f"is still accepted as 'alice2' ({second})" in err

        async def withdrawn() -> bool:
            return not await unusable(gateway.url, bob)

        # tokens2.toml loads once alice is gone from tokens.toml: the secret gets in as alice2.
        await eventually(withdrawn, "auth.token_file_unusable not withdrawn")
        assert await accepted(gateway.url, alice)

        code, out, err = await run_cli("token", "revoke", "alice2", "--file", str(second), "--config", str(config))
        assert code == 0, err

        async def refused() -> bool:
            return not await accepted(gateway.url, alice)

        await eventually(refused, "the secret is still accepted after both names were revoked")
        assert await accepted(gateway.url, bob)
    finally:
        STANDING.withdraw(f"{TOKEN_FILE_UNUSABLE}:{second}")
