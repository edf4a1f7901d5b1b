"""A token file the gateway could not use (a name it shares with another token file) is looked at again
at every check, changed or not: undoing the clash in the other file brings its edit into use, and the
standing problem auth.token_file_unusable lasts exactly as long as the file is not used."""

from __future__ import annotations

from pathlib import Path

from gateway.core.broker.problems import STANDING
from gateway.policy.static_tokens import RELOAD_CHECK_S, StaticTokenVerifier
from gateway.policy.token_files import create_token, read_token_file, render_token_file, write_atomically

UNUSABLE = "auth.token_file_unusable"


def problems(path: Path) -> list[str]:
    return [
        problem.evidence for problem in STANDING.current() if problem.id == UNUSABLE and str(path) in problem.evidence
    ]


async def test_a_clash_undone_in_the_other_file_brings_the_unchanged_file_into_use(tmp_path: Path) -> None:
    first, second = tmp_path / "first.toml", tmp_path / "second.toml"
    low = create_token(first, "low", [])
    create_token(second, "ops", [])
    now = [0.0]
    verifier = StaticTokenVerifier([], [first, second], tls=False, clock=lambda: now[0])
    try:
        create_token(first, "ops", [])  # the same name as in second: first cannot be used
        write_atomically(first, render_token_file([e for e in read_token_file(first) if e.name != "low"]))
        now[0] += RELOAD_CHECK_S
        verifier.reload_if_changed()
        assert verifier.match(low) is not None  # first's previous tokens are kept: "low" still works
        assert problems(first) == [f"{first}: the token name 'ops' is used in both {first} and {second}"]

        # second gives up "ops"; first is not touched again.
        write_atomically(second, render_token_file([]))
        now[0] += RELOAD_CHECK_S
        verifier.reload_if_changed()
        assert verifier.match(low) is None  # first's edit (low revoked) applies now
        assert problems(first) == []
    finally:
        await verifier.close()
        STANDING.withdraw(f"{UNUSABLE}:{first}")
