"""What an endpoint, a LAN host or a board sends cannot act on the operator's terminal, and a malformed
answer ends a command in one line, not a traceback (docs/cli.md): a hostile HTTP server on a free
loopback port as `--url`, `call` in a process of its own; discover's renderer fed a Found built as
browse() builds it; the audit csv writer; `devices revoke`'s report of the links the gateway ended."""

from __future__ import annotations

import argparse
import io
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from gateway.cli.audit import write_csv
from gateway.cli.devices import _end_links
from gateway.discovery.browse import Found, _instance_of, _text, render
from tests.support.gateway_process import REPO, clean_environment
from tests.support.raw_http import RawHttpServer

ESC = b"\x1b"
TITLE = ESC + b"]0;PWNED\x07"
CLEAR = ESC + b"[2J"


def no_control(text: str) -> bool:
    """Nothing a terminal would act on or reorder: only printing characters and newlines."""
    return all(char.isprintable() or char == "\n" for char in text)


class HostileServer(RawHttpServer):
    """Answers every request with `answer`, as it is."""

    def __init__(self) -> None:
        self.answer = b""
        super().__init__(lambda _, connection: connection.sendall(self.answer))


@pytest.fixture
def hostile() -> Iterator[HostileServer]:
    server = HostileServer()
    yield server
    server.stop()


def answer(status: str, content_type: bytes, body: bytes, extra: bytes = b"") -> bytes:
    head = f"HTTP/1.1 {status}\r\nContent-Length: {len(body)}\r\nConnection: close\r\n".encode()
    return head + (b"Content-Type: " + content_type + b"\r\n" if content_type else b"") + extra + b"\r\n" + body


def cli(*args: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    """`mcp-gateway ARGS` in a process of its own: exit code, stdout, stderr (decoded as written)."""
    done = subprocess.run(
        [sys.executable, "-m", "gateway.cli", *args],
        capture_output=True,
        timeout=30,
        check=False,
        cwd=REPO,
        env=clean_environment(env),
    )
    return done.returncode, done.stdout.decode(errors="replace"), done.stderr.decode(errors="replace")


def call(server: HostileServer) -> tuple[int, str, str]:
    return cli("call", "pump-1", "get_status", "--url", server.url)


def test_a_redirect_shows_its_location_escaped(hostile: HostileServer) -> None:
    location = b"http://evil.example/" + TITLE + CLEAR + b"\xc2\x9b2J\xe2\x80\xaeabc"
    hostile.answer = answer("302 Found", b"", b"", b"Location: " + location + b"\r\n")
    code, out, err = call(hostile)
    assert (code, out) == (1, "")
    assert no_control(err) and err.count("\n") == 1
    assert "a redirect to http://evil.example/\\u001b]0;PWNED\\u0007\\u001b[2J\\u009b2J\\u202eabc," in err


def test_a_json_rpc_error_with_a_code_that_is_no_integer_shows_it_escaped(hostile: HostileServer) -> None:
    body = b'{"jsonrpc":"2.0","id":1,"error":{"code":"\\u001b]0;PWNED\\u0007\\u001b[2J","message":"m"}}'
    hostile.answer = answer("200 OK", b"application/json", body)
    code, out, err = call(hostile)
    assert (code, out) == (1, "")
    assert err == 'mcp-gateway: m (code "\\u001b]0;PWNED\\u0007\\u001b[2J")\n'


@pytest.mark.parametrize(
    ("content_type", "body", "said"),
    [
        (b"application/json", b"[]", "JSON that is not a JSON-RPC message (an object): []"),
        (
            b"application/json",
            b'{"jsonrpc":"2.0","id":1,"error":"x\\u001b"}',
            'not a JSON-RPC error object: "x\\u001b"',
        ),
        (b"application/json", b'{"jsonrpc":"2.0","id":1}', 'holds no result object: {"jsonrpc":"2.0","id":1}'),
        (b"text/event-stream", b"data: {bad\x1b}\n\n", "an event whose data is not JSON: {bad\\u001b}"),
        (b"text/event-stream", b"data: \xff\xfe\n\n", "a line that is not UTF-8"),
    ],
)
def test_a_malformed_answer_is_one_line_naming_the_url(
    hostile: HostileServer, content_type: bytes, body: bytes, said: str
) -> None:
    hostile.answer = answer("200 OK", content_type, body)
    code, out, err = call(hostile)
    assert (code, out) == (1, "")
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert f"{hostile.url}/pump-1/mcp" in err and said in err
    assert no_control(err)


@pytest.mark.parametrize("via", ["file", "environment"])
def test_a_token_with_a_control_character_is_refused_naming_where_not_the_token(
    hostile: HostileServer, tmp_path: Path, via: str
) -> None:
    token = "SECRETabc\x01def"
    if via == "file":
        token_file = tmp_path / "ctl.tok"
        token_file.write_text(token + "\n")
        token_file.chmod(0o600)
        code, out, err = cli("slots", "--url", hostile.url, "--token-file", str(token_file))
        where = f"--token-file {token_file}"
    else:
        code, out, err = cli("slots", "--url", hostile.url, env={"MCP_GATEWAY_TOKEN": token})
        where = "$MCP_GATEWAY_TOKEN"
    assert (code, out) == (2, "")
    assert err.count("\n") == 1 and where in err and "U+0001" in err
    assert "SECRET" not in err and "def" not in err


def test_discover_shows_what_a_lan_host_advertised_escaped() -> None:
    properties = {
        b"url": b"http://10.0.0.9:3000" + TITLE + CLEAR,
        b"provider" + ESC + b"[31m": b"/provider\xc2\x9b2J",
    }
    txt = {_text(key): _text(value) for key, value in properties.items()}
    name = _instance_of("gw\x1b[8m hidden\u202e._mcp-broker._tcp.local.", "_mcp-broker._tcp.local.")
    found = Found(name, "gw\x1b[5m.local.", 56020, ["10.0.0.9"], txt, ["_mcp-broker._tcp.local."])
    shown = render([found], 3)
    assert no_control(shown)
    lines = shown.splitlines()
    assert lines[0] == "gw\\u001b[8m hidden\\u202e"
    assert lines[1] == "  url        http://10.0.0.9:3000\\u001b]0;PWNED\\u0007\\u001b[2J"
    assert lines[2] == "  host       gw\\u001b[5m.local:56020"
    assert lines[5] == (
        "  txt        url=http://10.0.0.9:3000\\u001b]0;PWNED\\u0007\\u001b[2J provider\\u001b[31m=/provider\\u009b2J"
    )


def test_the_audit_csv_escapes_what_a_caller_or_provider_wrote() -> None:
    import csv

    record = {
        "time_ms": 0,
        "id": 1,
        "principal": ["token:agent\x9b"],
        "tool": "t\x1b]0;T\x07\x1b[2J",
        "error": "boom\u202e\x7f",
        "reason": "\r=1",
        "detail": "line1\nline2\tcol",
        "latency_ms": -2.5,
    }
    out = io.StringIO()
    write_csv([record], out)
    written = out.getvalue()
    assert all(char.isprintable() or char in "\n\t" for char in written)
    (row,) = csv.DictReader(io.StringIO(written, newline=""))
    assert row["tool"] == "t\\u001b]0;T\\u0007\\u001b[2J"
    assert row["error"] == "boom\\u202e\\u007f"
    assert row["principal"] == '["token:agent\\u009b"]'  # JSON text, the same JSON
    assert row["reason"] == "'\\r=1"  # marked as text for starting with a carriage return, then escaped
    assert row["detail"] == "line1\nline2\tcol"  # a text's lines stay lines, in a quoted cell
    assert (row["id"], row["latency_ms"]) == ("1", "-2.5")


def test_devices_revoke_shows_the_gateways_report_escaped(
    hostile: HostileServer, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("MCP_GATEWAY_TOKEN", raising=False)
    body = (
        b'{"jsonrpc":"2.0","id":1,"result":{"content":[],"structuredContent":{"ended":[{"slot":"pump-1",'
        b'"device_id":"esp\\u001b]0;PWNED\\u0007","transport":"ws\\u009b2J","how":"closed\\u001b[2J"}],'
        b'"problems":["p\\u202e\\u001b[31m"]}}}'
    )
    hostile.answer = answer("200 OK", b"application/json", body)
    revoked = argparse.Namespace(slot="pump-1")
    _end_links(argparse.Namespace(url=hostile.url, token_file=None), revoked, mqtt=False)
    out = capsys.readouterr().out
    assert no_control(out)
    assert "ended pump-1 (ws\\u009b2J, esp\\u001b]0;PWNED\\u0007): closed\\u001b[2J\n" in out
    assert f"the gateway at {hostile.url}: p\\u202e\\u001b[31m\n" in out
