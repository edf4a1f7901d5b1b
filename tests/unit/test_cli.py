"""The `mcp-gateway` command (gateway/cli/) through `main([...])`, `call`'s argument parsing, the slots table."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest

import gateway.app
from bench.ports import free_port
from gateway import __version__
from gateway.cli import build_parser, main
from gateway.cli.columns import aligned
from gateway.client import display_width, listed_slots, parse_arguments, render_tools, slots_table

pytestmark = pytest.mark.usefixtures("cli_environment")


@pytest.fixture
def no_serving(monkeypatch: pytest.MonkeyPatch) -> None:
    """`run` must refuse before it serves anything; serving here would be a failure, not a hang."""

    async def refuse_to_serve(config: Any, **_: Any) -> None:
        raise AssertionError("the gateway started serving")

    monkeypatch.setattr(gateway.app, "serve", refuse_to_serve)


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as caught:
        main(["--version"])
    assert caught.value.code == 0
    assert capsys.readouterr().out == f"mcp-gateway {__version__}\n"


def test_a_command_is_required(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as caught:
        main([])
    assert caught.value.code == 2
    assert "usage: mcp-gateway" in capsys.readouterr().err


def test_help_loads_no_command_s_libraries() -> None:
    """`mcp-gateway --help` (and every parse) stays quick: a command imports what it needs when it runs."""
    probe = (
        "import sys\n"
        "from gateway.cli import main\n"
        "try:\n"
        "    main(['--help'])\n"
        "except SystemExit:\n"
        "    pass\n"
        "heavy = ('aiohttp', 'mcp', 'zeroconf', 'paho', 'serial', 'gateway.app', 'sim.simulator', 'gateway.logs')\n"
        "print(sorted(name for name in heavy if name in sys.modules), file=sys.stderr)\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=30, check=True)
    assert "usage: mcp-gateway" in done.stdout
    assert done.stderr == "[]\n"


def test_python_m_gateway_cli_runs_the_command() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "gateway.cli", "--version"], capture_output=True, text=True, timeout=30, check=False
    )
    assert (done.returncode, done.stdout) == (0, f"mcp-gateway {__version__}\n")


def test_config_check_ok(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["config", "check"]) == 0
    assert capsys.readouterr().out == "configuration OK\n"


def test_config_show_prints_the_effective_values_as_json(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    config_file = tmp_path / "gateway.toml"
    config_file.write_text('host = "127.0.0.2"\n[limits]\nmax_body_bytes = 1000\n', encoding="utf-8")
    monkeypatch.setenv("MCP_GATEWAY_LIMITS__MAX_SLOTS", "12")
    assert main(["config", "show", "--config", str(config_file), "--port", "4000"]) == 0
    shown = orjson.loads(capsys.readouterr().out)
    assert shown["host"] == "127.0.0.2"  # file
    assert shown["limits"]["max_body_bytes"] == 1000  # file
    assert shown["limits"]["max_slots"] == 12  # environment
    assert shown["port"] == 4000  # flag
    assert shown["providers"]["takeover"] == "liveness"  # default


def test_config_takes_runs_flags_and_judges_what_run_would_start(capsys: pytest.CaptureFixture[str]) -> None:
    flags = ["--mqtt", "mqtt://127.0.0.1:1884", "--serial", "/dev/ttyUSB0@921600", "--stdio", "memory=echo hi"]
    assert (
        main(["config", "show", *flags, "--remote", "far=http://127.0.0.1:9/mcp", "--mdns", "--log-level", "debug"])
        == 0
    )
    shown = orjson.loads(capsys.readouterr().out)
    assert [broker["url"] for broker in shown["mqtt"]["brokers"]] == ["mqtt://127.0.0.1:1884"]
    assert [(port["path"], port["baud"]) for port in shown["serial"]["ports"]] == [("/dev/ttyUSB0", 921600)]
    assert [upstream["name"] for upstream in shown["upstreams"]["stdio"]] == ["memory"]
    assert [upstream["name"] for upstream in shown["upstreams"]["remote"]] == ["far"]
    assert (shown["mdns"]["enabled"], shown["logging"]["level"]) == (True, "debug")
    assert main(["config", "check", *flags]) == 0
    assert capsys.readouterr().out == "configuration OK\n"
    with pytest.raises(SystemExit) as refused:  # a bad flag value is a usage error, as for run
        main(["config", "check", "--mqtt", "ftp://127.0.0.1"])
    assert refused.value.code == 2
    assert "argument --mqtt: expected mqtt://HOST[:PORT]" in capsys.readouterr().err


def test_config_show_defaults(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["config", "show"]) == 0
    shown = orjson.loads(capsys.readouterr().out)
    assert (shown["host"], shown["port"], shown["insecure_lan"]) == ("127.0.0.1", 3000, False)


def test_config_check_with_a_missing_file_names_it(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["config", "check", "--config", "missing.toml"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == "mcp-gateway: config file missing.toml: not found\n"


def test_config_check_with_an_unknown_key_names_it(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    config_file = tmp_path / "gateway.toml"
    config_file.write_text("prot = 3000\n", encoding="utf-8")
    assert main(["config", "check", "--config", str(config_file)]) == 2
    assert f"config file {config_file}: unknown setting 'prot'" in capsys.readouterr().err


def test_config_check_with_a_bad_environment_variable_names_it(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MCP_GATEWAY_PROT", "3000")
    assert main(["config", "check"]) == 2
    assert "environment variable MCP_GATEWAY_PROT: no such setting" in capsys.readouterr().err


def test_config_check_warns_that_run_would_refuse_a_lan_bind(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["config", "check", "--host", "0.0.0.0"]) == 2
    assert "`run` would refuse it" in capsys.readouterr().err
    assert main(["config", "check", "--host", "0.0.0.0", "--insecure-lan"]) == 0


@pytest.mark.usefixtures("no_serving")
def test_run_refuses_a_lan_bind_without_insecure_lan(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "--host", "0.0.0.0"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(
        "mcp-gateway: refusing to listen on 0.0.0.0 without client authentication or provider authentication"
    )
    # The message says what to do instead: both keys, loopback, or the flag.
    assert "[auth]" in err and "[providers.auth]" in err
    assert "bind to 127.0.0.1" in err
    assert "--insecure-lan" in err


@pytest.mark.usefixtures("no_serving")
def test_run_refuses_a_lan_bind_from_the_environment_too(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Every interface: an address this machine has (one it lacks is refused as such, before this rule).
    monkeypatch.setenv("MCP_GATEWAY_HOST", "0.0.0.0")
    assert main(["run"]) == 2
    assert "refusing to listen on 0.0.0.0" in capsys.readouterr().err


@pytest.mark.usefixtures("no_serving")
def test_run_with_a_missing_config_file_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "--config", "missing.toml"]) == 2
    assert "config file missing.toml: not found" in capsys.readouterr().err


def test_call_against_a_closed_port_says_the_gateway_is_unreachable(capsys: pytest.CaptureFixture[str]) -> None:
    port = free_port()  # nobody listens there
    assert main(["call", "pump-1", "add", "a=1", "b=2", "--url", f"http://127.0.0.1:{port}"]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith(f"mcp-gateway: cannot reach the gateway at http://127.0.0.1:{port}/pump-1/mcp")


def test_call_with_an_argument_without_equals_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["call", "pump-1", "add", "a=1", "b"]) == 2
    assert capsys.readouterr().err == "mcp-gateway call: argument 'b' is not key=value\n"


def test_call_without_a_tool_names_only_the_tool(capsys: pytest.CaptureFixture[str]) -> None:
    """key=value is optional: argparse must not report it missing along with the tool."""
    with pytest.raises(SystemExit) as caught:
        main(["call", "pump-1"])
    assert caught.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        "mcp-gateway call: error: the following arguments are required: tool"
    )
    with pytest.raises(SystemExit):
        main(["call"])
    assert capsys.readouterr().err.splitlines()[-1] == (
        "mcp-gateway call: error: the following arguments are required: slot, tool"
    )


def test_call_without_arguments_parses_to_no_arguments() -> None:
    args = build_parser().parse_args(["call", "pump-1", "get_status"])
    assert (args.slot, args.tool, args.arguments) == ("pump-1", "get_status", [])
    assert build_parser().parse_args(["call", "pump-1", "add", "a=1", "b=2"]).arguments == ["a=1", "b=2"]


# -- listed_slots and slots_table (mcp-gateway slots) ------------------------------------------------------------


def slot_entry(name: str, **fields: Any) -> dict[str, Any]:
    """One providers_list entry with what the slots table reads; an empty slot no provider ever held by default."""
    entry: dict[str, Any] = {"name": name, "connected": False, "state": "empty", "declared": False}
    entry.update({"transport": None, "tools": 0, "pending": 0, "connects": 0, "upstream": None})
    entry.update(fields)
    return entry


def slots_result(*entries: dict[str, Any]) -> dict[str, Any]:
    return {"structuredContent": {"count": len(entries), "providers": list(entries)}}


def render_slots(result: dict[str, Any], show_all: bool = False) -> str:
    """The table `slots` prints on stdout, then the note it prints on stderr."""
    listed, note = listed_slots(result, show_all)
    return slots_table(listed) + (f"\n{note}" if note else "")


def test_slots_lists_devices_and_counts_names_only_asked_for() -> None:
    result = slots_result(
        slot_entry("files", upstream={"kind": "stdio", "restarts": 4}),  # configured, never up yet
        slot_entry("pmup-1"),  # a typo
        slot_entry("pump-1", connected=True, state="ready", transport="websocket", tools=4, connects=1),
        slot_entry("pump-2", connects=2),  # its board left
        slot_entry("pump-3", declared=True),
        slot_entry("pump-9"),
        slot_entry("tank-1", connected=True, state="initializing", transport="mqtt", connects=1),
    )
    assert render_slots(result).splitlines() == [
        "SLOT                     STATE        TRANSPORT      TOOLS PENDING",
        "files                    empty        -                  0       0",
        "pump-1                   ready        websocket          4       0",
        "pump-2                   empty        -                  0       0",
        "pump-3                   empty        -                  0       0",
        "tank-1                   initializing mqtt               0       0",
        "2 names asked for with no provider (see mcp-gateway slots --all)",
    ]
    everything = render_slots(result, show_all=True).splitlines()
    assert [line.split()[0] for line in everything[1:]] == [
        "files",
        "pmup-1",
        "pump-1",
        "pump-2",
        "pump-3",
        "pump-9",
        "tank-1",
    ]


def test_slots_align_wide_and_combining_names_in_terminal_columns() -> None:
    # A CJK character takes two columns of a terminal and a combining accent none: STATE starts in the
    # same column on every line however the names are written.
    names = ["实验-一", "pump-1", "cafe\u0301-pump", "实验室水泵第二十六号-pump-a"]
    result = slots_result(*(slot_entry(name, connected=True, state="ready", connects=1) for name in names))
    lines = render_slots(result).splitlines()
    starts = {
        display_width(line[: line.index(" ready" if index else " STATE") + 1]) for index, line in enumerate(lines)
    }
    assert len(starts) == 1, lines
    assert starts == {display_width(names[3]) + 1}


def test_aligned_columns_count_terminal_columns() -> None:
    table = aligned(["DEVICE", "SLOT"], [["测试板", "a"], ["board", "b"]]).splitlines()
    assert table == ["DEVICE  SLOT", "测试板  a", "board   b"]


def test_slots_with_only_names_asked_for_or_none() -> None:
    assert render_slots(slots_result()) == "no slots yet"
    assert render_slots(slots_result(slot_entry("pump-9"))) == (
        "no slots yet\n1 name asked for with no provider (see mcp-gateway slots --all)"
    )


def test_slots_of_a_gateway_that_does_not_say_connects_lists_every_slot() -> None:
    entry = slot_entry("pump-9")
    del entry["connects"]
    assert render_slots(slots_result(entry)).splitlines()[1].split()[:2] == ["pump-9", "empty"]


# -- parse_arguments ----------------------------------------------------------------------------


def test_json_values_are_taken_as_json() -> None:
    assert parse_arguments(["a=1", "b=2.5", "on=true", "off=false", "nothing=null"]) == {
        "a": 1,
        "b": 2.5,
        "on": True,
        "off": False,
        "nothing": None,
    }
    assert parse_arguments(['point={"x": 1, "y": [2, 3]}', "list=[1,2]", 'quoted="42"']) == {
        "point": {"x": 1, "y": [2, 3]},
        "list": [1, 2],
        "quoted": "42",
    }


def test_other_values_are_text() -> None:
    assert parse_arguments(["name=pump one", "serial=007", "empty=", "tag={not json"]) == {
        "name": "pump one",
        "serial": "007",  # leading zeros are not JSON, so a serial number stays text
        "empty": "",
        "tag": "{not json",
    }


def test_only_the_first_equals_splits() -> None:
    assert parse_arguments(["expr=a=b", "url=http://x/?q=1"]) == {"expr": "a=b", "url": "http://x/?q=1"}


def test_no_arguments() -> None:
    assert parse_arguments([]) == {}


@pytest.mark.parametrize("pair", ["a", "=1", ""])
def test_missing_equals_or_key_is_refused(pair: str) -> None:
    with pytest.raises(ValueError, match="is not key=value"):
        parse_arguments([pair])


def test_render_tools_shows_arguments_as_call_takes_them() -> None:
    tools: list[dict[str, Any]] = [
        {
            "name": "valve",
            "description": "Move the valve. It takes a while.\n\nMore text.",
            "inputSchema": {
                "type": "object",
                "properties": {
                    "mode": {"type": "string", "enum": ["open", "closed"]},
                    "percent": {"type": "number", "minimum": 0},
                    "note": {},
                },
                "required": ["percent"],
            },
        },
        {"name": "bare"},  # no schema, no description: still listed
        {"name": "odd", "inputSchema": {"properties": "not an object", "required": "nor a list"}},
    ]
    assert render_tools(tools).splitlines() == [
        "valve percent=NUMBER 0.. [mode=open|closed] [note=VALUE]",
        "    Move the valve.",
        "bare",
        "odd",
    ]
    assert render_tools(tools, full=True).splitlines()[1] == "    Move the valve. It takes a while. More text."
    assert render_tools([]) == "no tools"
