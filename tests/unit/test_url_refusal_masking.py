"""A refused --url is quoted back with its user's password, its query values and its anchor masked, also
when it is too malformed to parse as a URL, and the refusal names what is wrong with it (docs/cli.md)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from gateway.cli.common import check_base_url, shown_url

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("https//admin:hunter2@gw:3000", "https//admin:***@gw:3000"),  # no "://": urlsplit finds no user
        ("http:/admin:hunter2@gw", "http:/admin:***@gw"),
        ("admin:hunter2@gw:3000", "admin:***@gw:3000"),
        ("https//ghp_hunter2@gw", "https//***@gw"),  # a lone user name is often a token
        ("https//admin:hun/ter2@gw", "https//admin:***@gw"),  # a slash in the password
        ("https//gw:3000?token=hunter2#hunter2", "https//gw:3000?token=***#***"),
        ("http://u:hunter2@h:1/?a=hunter2", "http://u:***@h:1/?a=***"),
        ("http://h:1#hunter2", "http://h:1#***"),  # an anchor without a query
        ("127.0.0.1:3170", "127.0.0.1:3170"),
        ("http://h/p@x", "http://h/p@x"),  # after the authority: no userinfo
    ],
)
def test_a_quoted_url_shows_no_secret_whatever_its_parse(text: str, shown: str) -> None:
    assert shown_url(text) == shown


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("http://h:3000/?a=b", "with no query (?...); got 'http://h:3000/?a=***'"),
        ("http://h:3000#top", "with no anchor (#...); got 'http://h:3000#***'"),
        ("http://h:3000/mcp", "with no path; got 'http://h:3000/mcp'"),
        ("http://h:3000/mcp?a=b", "with no path or query (?...); got 'http://h:3000/mcp?a=***'"),
    ],
)
def test_the_refusal_names_the_part_that_is_wrong(text: str, problem: str) -> None:
    with pytest.raises(ValueError, match="with no") as refused:
        check_base_url(text, "the gateway's base URL", "http://HOST:PORT", token_flag="--token-file")
    assert str(refused.value) == f"is the gateway's base URL, e.g. http://HOST:PORT, {problem}"


def test_the_stdio_bridge_does_not_print_a_password_from_a_url_without_its_colon() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "gateway.cli", "stdio", "--url", "https//admin:hunter2@gw:3000"],
        capture_output=True,
        stdin=subprocess.DEVNULL,
        cwd=str(REPO),
        env={k: v for k, v in os.environ.items() if k != "MCP_GATEWAY_URL"},
        timeout=60,
        check=False,
    )
    err = done.stderr.decode()
    assert (done.returncode, done.stdout) == (2, b""), err
    assert "hunter2" not in err, err
    assert "must start with http:// or https://" in err and "got 'https//admin:***@gw:3000'" in err, err
