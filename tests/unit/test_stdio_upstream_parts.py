"""The pure parts of stdio upstreams: bounded stdout lines, the stderr tail, the child's environment,
the [[upstreams.stdio]] configuration and `--stdio NAME=COMMAND`, and what diagnosis says."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

import gateway.app
from gateway.cli import main
from gateway.config import ConfigError, GatewayConfig, load_config, masked_dump
from gateway.core.answer_head import HEAD_BYTES, answer_id
from gateway.core.broker.diagnose import diagnose
from gateway.core.broker.problems import GatewayView, SlotView
from gateway.southbound.stdio.link import BASE_ENV, LineSplitter, OversizedLine, StderrRing, child_environment

# -- stdout lines -----------------------------------------------------------------------------


def test_lines_are_split_across_chunks() -> None:
    splitter = LineSplitter(limit=16)
    assert splitter.feed(b'{"a":1}\n{"b"') == [b'{"a":1}']
    assert splitter.feed(b":2}\n\n") == [b'{"b":2}', b""]
    assert splitter.oversized == 0


def test_an_oversized_line_is_dropped_whole_and_the_next_one_kept() -> None:
    splitter = LineSplitter(limit=8)
    assert splitter.feed(b"12345") == []
    # Over the limit: dropped from here to its newline, its first bytes given in its place at once.
    assert splitter.feed(b"6789abc") == [OversizedLine(b"123456789abc")]
    assert splitter.feed(b"def" * 1000) == []
    assert splitter.feed(b"tail\nok\n") == [b"ok"]
    assert splitter.oversized == 1
    assert splitter.feed(b"12345678\n123456789\n") == [b"12345678", OversizedLine(b"123456789")]
    assert splitter.oversized == 2


def test_an_oversized_line_keeps_only_its_head_in_order_among_the_lines() -> None:
    splitter = LineSplitter(limit=1000)
    answer = b'{"jsonrpc":"2.0","id":"brk-7","result":{"text":"' + b"y" * 5000 + b'"}}'
    lines = splitter.feed(b'{"a":1}\n' + answer[:3000])
    assert lines[0] == b'{"a":1}'
    assert lines[1] == OversizedLine(answer[:HEAD_BYTES])
    assert isinstance(lines[1], OversizedLine) and answer_id(lines[1].head) == "brk-7"
    assert splitter.feed(answer[3000:] + b"\n" + b'{"b":2}\n') == [b'{"b":2}']
    assert splitter.oversized == 1


# -- stderr tail ------------------------------------------------------------------------------


def test_the_stderr_tail_keeps_the_newest_lines_within_its_bytes() -> None:
    ring = StderrRing(max_bytes=12)
    ring.feed(b"one\ntwo\nthree\nfour\nfive\nsix")
    assert ring.tail() == ["four", "five"]
    ring.flush()  # stderr closed: the unfinished line counts too
    assert ring.tail() == ["four", "five", "six"]
    assert ring.size == sum(len(line) for line in ring.tail()) <= 12
    assert ring.dropped_lines == 3


def test_a_long_stderr_line_is_cut() -> None:
    ring = StderrRing(max_bytes=4096)
    ring.feed(b"x" * 10_000)
    ring.feed(b"y" * 10_000 + b"\r\nnext\n")
    assert ring.tail() == ["x" * 1000 + "…", "next"]
    assert ring.cut_lines == 1
    tiny = StderrRing(max_bytes=10)
    tiny.feed("é".encode() * 20 + b"\n")
    assert tiny.tail() == ["é" * 3 + "…"]
    assert tiny.size <= 10


# -- environment ------------------------------------------------------------------------------


def test_the_child_environment_is_an_allow_list() -> None:
    gateway_env = {"PATH": "/usr/bin", "HOME": "/root", "SECRET_TOKEN": "s3cret", "SHARED": "yes", "LANG": "C.UTF-8"}
    env, missing = child_environment({"MODE": "plant", "HOME": "/srv/app"}, ["SHARED", "ABSENT"], gateway_env)
    assert env == {"PATH": "/usr/bin", "HOME": "/srv/app", "LANG": "C.UTF-8", "SHARED": "yes", "MODE": "plant"}
    assert missing == ["ABSENT"]
    assert set(BASE_ENV) == {"PATH", "HOME", "LANG", "LC_ALL", "TZ", "TMPDIR"}


# -- configuration ----------------------------------------------------------------------------


def stdio(**entry: Any) -> GatewayConfig:
    return GatewayConfig.model_validate({"upstreams": {"stdio": [{"name": "memory", "command": "npx -y x", **entry}]}})


def test_a_command_string_is_split_like_a_shell_would() -> None:
    upstream = stdio(command="node 'my server.js' --flag=\"a b\"").upstreams.stdio[0]
    assert upstream.command == ["node", "my server.js", "--flag=a b"]
    assert upstream.startup_timeout_s == 10.0
    assert upstream.aggregate is False


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"name": "_all"}, "reserved"),
        ({"name": ".."}, "path step in URLs"),
        ({"name": "files\u2066x"}, "bidirectional controls"),
        ({"command": ""}, "at least 1 item"),
        ({"command": "node 'unclosed"}, "cannot be split"),
        ({"env": {"BAD-NAME": "x"}}, "not an environment variable name"),
        ({"env_passthrough": ["A B"]}, "not an environment variable name"),
        ({"restart_initial_s": 5, "restart_max_s": 1}, "restart_max_s must be at least restart_initial_s"),
        ({"cwd": "/no/such/dir"}, "not a directory"),
        ({"shell": True}, "Extra inputs are not permitted"),
    ],
)
def test_a_bad_stdio_upstream_is_refused_with_its_reason(entry: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        stdio(**entry)


def test_config_show_masks_the_values_given_to_a_child() -> None:
    dumped = masked_dump(stdio(env={"API_KEY": "k-123456"}))
    assert dumped["upstreams"]["stdio"][0]["env"] == {"API_KEY": "***"}
    assert dumped["upstreams"]["stdio"][0]["command"] == ["npx", "-y", "x"]


def test_upstream_names_are_unique_and_declared_when_only_declared(tmp_path: Path) -> None:
    twice = {"upstreams": {"stdio": [{"name": "a", "command": ["x"]}, {"name": "a", "command": ["y"]}]}}
    with pytest.raises(ValueError, match="repeated: a"):
        GatewayConfig.model_validate(twice)
    undeclared = {"slots": {"only_declared": True}, "upstreams": {"stdio": [{"name": "a", "command": ["x"]}]}}
    with pytest.raises(ValueError, match=r"add \[slots.declared.a\]"):
        GatewayConfig.model_validate(undeclared)


def test_the_stdio_flag_adds_to_the_configured_upstreams(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith("MCP_GATEWAY"):
            monkeypatch.delenv(name)
    config_file = tmp_path / "gateway.toml"
    config_file.write_text(
        '[[upstreams.stdio]]\nname = "files"\ncommand = ["npx", "-y", "server-filesystem", "/srv"]\n'
    )
    seen: list[GatewayConfig] = []
    sources: list[Any] = []

    async def capture(config: GatewayConfig, source: Any = None) -> None:
        seen.append(config)
        sources.append(source)

    monkeypatch.setattr(gateway.app, "serve", capture)
    flag = "memory=npx -y '@modelcontextprotocol/server-memory'"
    assert main(["run", "--config", str(config_file), "--stdio", flag, "--stdio", "demo=python -m demo"]) == 0
    upstreams = seen[0].upstreams.stdio
    assert [(u.name, u.command) for u in upstreams] == [
        ("files", ["npx", "-y", "server-filesystem", "/srv"]),
        ("memory", ["npx", "-y", "@modelcontextprotocol/server-memory"]),
        ("demo", ["python", "-m", "demo"]),
    ]
    assert sources[0].load().upstreams.stdio == upstreams  # a reload loads it the same way, flags included
    with pytest.raises(ConfigError, match=r"command-line flag for upstreams\.stdio.*repeated: files"):
        load_config(config_file, environ={}, flags={"upstreams.stdio": [{"name": "files", "command": ["x"]}]})


@pytest.mark.parametrize("flag", ["no-equals-sign", "=python x", "demo=", "demo=python 'unclosed"])
def test_a_malformed_stdio_flag_stops_the_command(flag: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as caught:
        main(["run", "--stdio", flag])
    assert caught.value.code == 2
    assert "--stdio" in capsys.readouterr().err


# -- diagnosis --------------------------------------------------------------------------------


def upstream_view(connected: bool = False, **upstream: Any) -> GatewayView:
    status = {
        "kind": "stdio",
        "state": "backoff",
        "command": ["node", "server.js"],
        "failures_in_a_row": 1,
        "crash_loop": False,
        "last_exit": "pid 41 exited with code 1",
        "last_exit_kind": "exit",
        "next_restart_in_s": 2.0,
        "startup_timeout_s": 10.0,
        "restart_max_s": 60.0,
        "stderr_tail": ["starting", "Error: ENOENT: no such file /data/memory.json"],
        **upstream,
    }
    slot = SlotView(name="memory", connected=connected, state="ready" if connected else "empty", upstream=status)
    return GatewayView(
        url="http://127.0.0.1:3000", host="127.0.0.1", is_loopback=True, insecure_lan=False, slots=[slot]
    )


def test_a_crash_loop_is_an_error_with_the_stderr_tail_as_evidence() -> None:
    problems = diagnose(upstream_view(failures_in_a_row=4, crash_loop=True), "memory")
    assert [problem.id for problem in problems] == ["upstream.crash_loop"]
    loop = problems[0]
    assert loop.severity == "error"
    assert "4 times in a row" in loop.summary
    assert "Error: ENOENT: no such file /data/memory.json" in loop.evidence
    assert "pid 41 exited with code 1" in loop.evidence
    assert "node server.js" in loop.fix


def test_a_crash_loop_of_start_up_deadlines_leads_with_raising_the_deadline_and_quotes_the_command() -> None:
    command = ["python", "-c", "import sys; print('x', file=sys.stderr)"]
    slow = upstream_view(failures_in_a_row=3, crash_loop=True, last_exit_kind="startup_timeout", command=command)
    [loop] = diagnose(slow, "memory")
    assert loop.id == "upstream.crash_loop"
    assert loop.fix.startswith("The child must answer within startup_timeout_s (10.0s); raise it")
    # Pasted into a shell as printed, the command runs as the gateway runs it.
    assert """python -c 'import sys; print('"'"'x'"'"', file=sys.stderr)'""" in loop.fix


def test_a_stdio_upstream_down_is_not_reported_as_a_missing_board() -> None:
    ids = [problem.id for problem in diagnose(upstream_view(), "memory")]
    assert ids == ["upstream.down"]
    timeout = diagnose(upstream_view(last_exit_kind="startup_timeout"), "memory")
    assert [problem.id for problem in timeout] == ["upstream.startup_timeout"]
    starting = diagnose(upstream_view(state="starting", last_exit=None, pid=7), "memory")
    assert [(problem.id, problem.severity) for problem in starting] == [("upstream.starting", "info")]
    # Its link already holds the slot while the child is in its handshake.
    in_handshake = diagnose(upstream_view(connected=True, state="starting", last_exit=None, pid=7), "memory")
    assert [problem.id for problem in in_handshake] == ["upstream.starting"]
    assert diagnose(upstream_view(connected=True, state="ready"), "memory") == []


def test_a_child_silent_to_server_discover_is_told_to_pin_the_session_era() -> None:
    mute = upstream_view(last_exit_kind="discover_timeout", last_exit="the child answered nothing to server/discover")
    [problem] = diagnose(mute, "memory")
    assert problem.id == "upstream.startup_timeout"
    assert problem.summary == 'The stdio upstream "memory" did not answer server/discover in time'
    assert problem.fix.startswith("It answered nothing to server/discover: a server of the session era")
    assert 'pin it with era = "session"' in problem.fix
    assert "raise it for a slow starter" in problem.fix
    looping = upstream_view(failures_in_a_row=3, crash_loop=True, last_exit_kind="discover_timeout")
    [loop] = diagnose(looping, "memory")
    assert loop.id == "upstream.crash_loop" and 'era = "session"' in loop.fix
