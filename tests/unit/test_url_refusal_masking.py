"""A refused --url is quoted back with its user's password, its query values and its anchor masked, also
when it is too malformed to parse as a URL, and the refusal names what is wrong with it (docs/cli.md); an
`@` after a host with a port is in the path, query or fragment, so the quote names the host given."""

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
        # The userinfo ends at the last @, whatever stands before it: a password may hold / ? # @.
        ("http://h/p@x", "http://***@x"),  # a user holding a / is masked whole
        ("http://admin:s3cr/et@gw:3000", "http://admin:***@gw:3000"),
        ("http://admin:hun?ter2@gw:3000", "http://admin:***@gw:3000"),
        ("http://admin:hun#ter2@gw:3000", "http://admin:***@gw:3000"),
        ("http://admin:hun@ter2@gw:3000", "http://admin:***@gw:3000"),
        ("http://admin:a/b?c#d@e@gw:3000/?x=hunter2#top", "http://admin:***@gw:3000/?x=***#***"),
        ("https//admin:s3cr/et@gw:3000", "https//admin:***@gw:3000"),
        ("https//admin:hun?ter2@gw:3000", "https//admin:***@gw:3000"),
        ("https//admin:hun#ter2@gw:3000", "https//admin:***@gw:3000"),
        ("https//admin:hun@ter2@gw:3000", "https//admin:***@gw:3000"),
        ("admin:hun?ter2@gw:3000", "admin:***@gw:3000"),
        ("admin:hun:ter2@gw", "admin:***@gw"),  # a colon in the password: not taken for a scheme
        ("https//ghp_hun?ter2@gw", "https//***@gw"),
        # A host with a port, then an @: a path's, or the end of a password starting with digits. Neither
        # another host nor the digits are quoted.
        ("http://h:1/?token=hun:ter2@x", "http://h:***"),
        ("http://127.0.0.1:58744/x@evil.example", "http://127.0.0.1:***"),
        ("http://127.0.0.1:58744/?a=b@c", "http://127.0.0.1:***"),
        ("http://h:1#a@b", "http://h:***"),
        ("http://[::1]:3000/a@b?c=d@e", "http://[::1]:***"),
        ("127.0.0.1:3170/x@y", "127.0.0.1:***"),
        ("http://admin:12345/abc@127.0.0.1:59041/mcp", "http://admin:***"),
        ("http://admin:2024?pin@gw:3000", "http://admin:***"),
        ("http://op:9/x#y@gw", "http://op:***"),
        ("http://127.0.0.1:58744/mcp", "http://127.0.0.1:58744/mcp"),
        # A "port" that is none (not digits, or past 65535) is a password cut short by its / ? #.
        ("http://admin:99999/et@gw:3000", "http://admin:***@gw:3000"),
        ("http://admin:1x/et@gw:3000/?q=a@b", "http://admin:***@b"),
        ("http://tok/en@gw:3000", "http://***@gw:3000"),  # a lone name before a /: a token may hold one
        ("admin:hunter2@gw?u=http://x", "admin:***@gw?u=***"),  # a :// after the @ is no scheme
        ("http://[::1]:3000", "http://[::1]:3000"),
        ("http://u:hunter2@[::1]:3000/?a=b&c#d", "http://u:***@[::1]:3000/?a=***&***#***"),
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


@pytest.mark.parametrize(
    ("text", "quoted"),
    [
        ("https//admin:hunter2@gw:3000", "https//admin:***@gw:3000"),
        ("https//admin:hun?ter2@gw:3000", "https//admin:***@gw:3000"),
        ("http://admin:s3cr/et@gw:3000", "http://admin:***@gw:3000"),
        ("http://admin:hun#ter2@gw:3000", "http://admin:***@gw:3000"),
    ],
)
def test_the_stdio_bridge_does_not_print_a_password_of_a_refused_url(text: str, quoted: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "gateway.cli", "stdio", "--url", text],
        capture_output=True,
        stdin=subprocess.DEVNULL,
        cwd=str(REPO),
        env={k: v for k, v in os.environ.items() if k != "MCP_GATEWAY_URL"},
        timeout=60,
        check=False,
    )
    err = done.stderr.decode()
    assert (done.returncode, done.stdout) == (2, b""), err
    password = text.split("admin:", 1)[1].rsplit("@", 1)[0]
    for piece in (password, password[:3], password[-3:]):
        assert piece not in err, err
    assert "mcp-gateway stdio: --url " in err and f"got {quoted!r}" in err, err


@pytest.mark.parametrize(
    ("text", "quoted"),
    [
        ("http://127.0.0.1:58920/x@evil.example", "with no path; got 'http://127.0.0.1:***'"),
        ("http://127.0.0.1:58920/?a=b@c", "with no query (?...); got 'http://127.0.0.1:***'"),
    ],
)
def test_the_stdio_bridge_quotes_no_host_it_was_not_given_when_an_at_follows_it(text: str, quoted: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "gateway.cli", "stdio", "--url", text],
        capture_output=True,
        stdin=subprocess.DEVNULL,
        cwd=str(REPO),
        env={k: v for k, v in os.environ.items() if k != "MCP_GATEWAY_URL"},
        timeout=60,
        check=False,
    )
    err = done.stderr.decode()
    assert (done.returncode, done.stdout) == (2, b""), err
    assert err.rstrip().endswith(quoted), err
