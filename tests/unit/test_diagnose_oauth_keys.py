"""broker_diagnose's findings about the OAuth key set, from the verifier's status alone."""

from __future__ import annotations

from typing import Any

from gateway.core.broker.diagnose import diagnose
from tests.unit.test_diagnose import ids, only, view

SOURCE = "https://idp.plant.example/jwks"


def keys(**overrides: Any) -> dict[str, Any]:
    status = {
        "source": SOURCE,
        "loaded": True,
        "keys": 2,
        "last_fetch_failed": False,
        "last_error": None,
        "fetched_ago_s": 12.0,
        "next_fetch_in_s": 588.0,
    }
    return {**status, **overrides}


def test_no_oauth_or_a_fresh_key_set_is_no_finding() -> None:
    assert ids(diagnose(view())) == ids(diagnose(view(oauth_keys=keys()))) == ["providers.none"]


def test_an_empty_key_set_refuses_every_token() -> None:
    problem = only(diagnose(view(oauth_keys=keys(keys=0))), "auth.oauth_keys_unavailable")
    assert problem.severity == "error"
    assert problem.evidence == f"the key set at {SOURCE} holds no key; the next fetch is in 588s"


def test_a_key_set_never_loaded_names_the_last_error_and_the_next_try() -> None:
    never = keys(loaded=False, keys=0, last_fetch_failed=True, last_error="HTTP 503", fetched_ago_s=None)
    problem = only(diagnose(view(oauth_keys={**never, "next_fetch_in_s": 30.0})), "auth.oauth_keys_unavailable")
    assert problem.evidence == f"no key set loaded from {SOURCE} yet: HTTP 503; the next fetch is in 30s"


def test_keys_held_that_could_not_be_refreshed_are_a_warning() -> None:
    stale = keys(last_fetch_failed=True, last_error="TimeoutError", next_fetch_in_s=30.0)
    problem = only(diagnose(view(oauth_keys=stale)), "auth.oauth_keys_stale")
    assert problem.severity == "warning"
    assert problem.evidence == (
        f"the last fetch from {SOURCE} failed: TimeoutError; tokens are checked against the 2 keys fetched 12s ago"
        "; the next fetch is in 30s"
    )
