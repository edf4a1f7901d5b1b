"""The client commands as a script runs them: a gateway that stays silent (--timeout), a call longer than
it, `stdio` finding the gateway as the others do, and output a script can read (`slots --json`, notes
on stderr, columns that hold any name, a stdout that cannot encode a name, descriptions not wrapped
into a pipe)."""

from __future__ import annotations

import asyncio
import shlex
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import orjson
import pytest
from mcp.server.mcpserver import MCPServer

from gateway.app import GatewayServer
from tests.conftest import GatewayFactory, Publishers
from tests.integration.test_cli_operator_errors import governed
from tests.integration.test_reload import Reloadable, reloadable, rewrite
from tests.support.gateway_process import REPO, clean_environment, run_cli
from tests.support.servers import demo_server
from tests.support.silent import closing_listener, redirecting_listener, silent_listener

__all__ = ["governed", "reloadable"]  # fixtures, used by name

INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "script", "version": "1"}},
}


@pytest.fixture
async def silent_gateway() -> AsyncIterator[str]:
    """A hung gateway: it takes connections and never answers. Its base URL."""
    async with silent_listener() as url:
        yield url


async def test_a_silent_gateway_is_named_after_the_timeout(silent_gateway: str) -> None:
    code, out, err = await run_cli("call", "pump-1", "get_status", "--url", silent_gateway, "--timeout", "1")
    assert (code, out) == (1, "")
    assert err == (
        f"mcp-gateway: no answer from the gateway at {silent_gateway}/pump-1/mcp within 1 s (--timeout); "
        "the call may still be carried out by the device\n"
    )
    code, out, err = await run_cli("slots", "--url", silent_gateway, "--timeout", "0.5")
    assert (code, out) == (1, "")
    assert err == f"mcp-gateway: no answer from the gateway at {silent_gateway}/_broker/mcp within 0.5 s (--timeout)\n"
    code, out, err = await run_cli("policy", "reload", "--url", silent_gateway, "--timeout", "0.5")
    assert (code, out) == (1, "")
    assert err == f"mcp-gateway: no answer from the gateway at {silent_gateway}/_broker/mcp within 0.5 s (--timeout)\n"
    # schema-hash --slot asks _broker first: one silence is the answer, not a second wait on the slot.
    code, out, err = await run_cli("schema-hash", "--slot", "pump-1", "--url", silent_gateway, "--timeout", "0.5")
    assert (code, out) == (1, "")
    assert err == f"mcp-gateway: no answer from the gateway at {silent_gateway}/_broker/mcp within 0.5 s (--timeout)\n"


async def test_a_gateway_gone_after_taking_the_call_is_not_called_unreachable() -> None:
    async with closing_listener() as url:
        code, out, err = await run_cli("call", "pump-1", "start", "speed_rpm=1200", "--url", url)
    assert (code, out) == (1, "")
    assert err == (
        f"mcp-gateway: the gateway at {url}/pump-1/mcp closed the connection before it answered; "
        "the call may have reached the device; if the gateway serves TLS ([tls] in its configuration), use https://\n"
    )


@pytest.mark.parametrize("status", [302, 307, 308])
async def test_a_redirect_is_not_followed(gateway: GatewayServer, publishers: Publishers, status: int) -> None:
    await publishers.start(gateway, "pump-1", demo_server("pump"))
    target = f"{gateway.url}/pump-1/mcp"  # a real slot: following the redirect would get an answer
    async with redirecting_listener(status, target) as url:
        code, out, err = await run_cli("call", "pump-1", "add", "a=1", "b=2", "--url", url)
    assert (code, out) == (1, "")
    assert err.startswith(f"mcp-gateway: HTTP {status} from {url}/pump-1/mcp: a redirect to {target}, which"), err


async def test_a_call_longer_than_the_timeout_is_waited_for_while_the_gateway_sends_keepalives(
    gateway_factory: GatewayFactory, publishers: Publishers
) -> None:
    gateway = await gateway_factory(limits={"sse_keepalive_s": 0.3})
    await publishers.start(gateway, "lab-1", demo_server("lab"))
    code, out, err = await run_cli("call", "lab-1", "sleep", "seconds=2.5", "--url", gateway.url, "--timeout", "1")
    assert (code, orjson.loads(out), err) == (0, {"result": "slept 2.5"}, "")


def test_an_error_without_a_message_is_named_by_its_class(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from gateway.cli import main

    def silent(_: object) -> int:
        raise TimeoutError  # as aiohttp's total timeout is: no message

    monkeypatch.setattr("gateway.cli.calls.cmd_slots", silent)
    assert main(["slots"]) == 1
    assert capsys.readouterr().err == "mcp-gateway: TimeoutError\n"


async def bridge_answer(env: dict[str, str], *args: str) -> tuple[int, bytes, str]:
    """`mcp-gateway stdio ARGS` given one initialize line: its exit code, stdout and stderr."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "gateway.cli",
        "stdio",
        *args,
        cwd=REPO,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=clean_environment(env),
    )
    out, err = await asyncio.wait_for(process.communicate(orjson.dumps(INITIALIZE) + b"\n"), 30)
    assert process.returncode is not None
    return process.returncode, out, err.decode()


async def test_stdio_finds_the_gateway_by_mcp_gateway_url_as_the_other_commands_do(
    gateway: GatewayServer, publishers: Publishers
) -> None:
    await publishers.start(gateway, "pump-1", demo_server("pump"))
    code, out, err = await bridge_answer({"MCP_GATEWAY_URL": gateway.url}, "--slot", "pump-1")
    assert code == 0, err
    answer = orjson.loads(out.splitlines()[0])
    assert answer["result"]["serverInfo"]["name"] == "pump", answer  # pump-1's own, through the gateway


async def test_stdio_refuses_a_url_with_a_path_from_the_flag_or_the_environment(gateway: GatewayServer) -> None:
    endpoint = f"{gateway.url}/pump-1/mcp"
    code, out, err = await bridge_answer({}, "--url", endpoint)
    assert (code, out) == (2, b"")
    assert err == (
        f"mcp-gateway stdio: --url is the gateway's base URL, e.g. http://HOST:PORT, with no path; got '{endpoint}'\n"
    )
    code, out, err = await bridge_answer({"MCP_GATEWAY_URL": endpoint})
    assert (code, out) == (2, b"")
    assert err.startswith("mcp-gateway stdio: --url (from $MCP_GATEWAY_URL) is the gateway's base URL"), err


LONG_NAME = "a-very-long-slot-name-for-the-north-building-line-2-pump-station"


async def test_slots_for_a_script_json_notes_on_stderr_and_whole_names(gateway: GatewayServer) -> None:
    for name in ("pompe à eau", LONG_NAME, "pump-9"):
        gateway.gateway.registry.slot(name)
    code, out, err = await run_cli("slots", "--url", gateway.url)
    assert (code, out) == (0, "no slots yet\n")
    assert err == "mcp-gateway slots: 3 names asked for with no provider (see mcp-gateway slots --all)\n"

    code, out, err = await run_cli("slots", "--all", "--url", gateway.url)
    assert (code, err) == (0, "")
    lines = out.splitlines()
    # Every row splits into its five fields, the name with a space quoted, and the columns line up.
    rows = [shlex.split(line) for line in lines]
    assert [row[0] for row in rows] == ["SLOT", LONG_NAME, "pompe à eau", "pump-9"]
    assert all(len(row) == 5 for row in rows)
    assert lines[2].startswith('"pompe à eau" ')
    assert len({line.index(" empty ") if " empty " in line else line.index(" STATE ") for line in lines}) == 1

    code, out, err = await run_cli("slots", "--all", "--json", "--url", gateway.url)
    assert (code, err) == (0, "")
    listed = orjson.loads(out)
    assert [entry["name"] for entry in listed] == [LONG_NAME, "pompe à eau", "pump-9"]
    assert listed[1]["connected"] is False

    code, out, err = await run_cli("slots", "--json", "--url", gateway.url)
    assert (code, orjson.loads(out)) == (0, [])
    assert "3 names asked for with no provider" in err


async def test_slots_and_tools_on_a_stdout_that_cannot_encode_a_name_escape_it(
    gateway: GatewayServer, publishers: Publishers
) -> None:
    await publishers.start(gateway, "pompe à eau", demo_server("eau"))
    ascii_locale = {"LC_ALL": "C", "PYTHONUTF8": "0", "PYTHONIOENCODING": "ascii"}
    code, out, err = await run_cli("slots", "--url", gateway.url, env=ascii_locale)
    assert (code, err) == (0, "")
    header, row = out.splitlines()[:2]
    assert row.startswith('"pompe \\u00e0 eau" ')  # a JSON string still
    assert row.index(" ready ") == header.index("STATE") - 1  # the column as wide as what shows
    code, out, err = await run_cli("slots", "--json", "--url", gateway.url, env=ascii_locale)
    assert (code, err) == (0, "")
    assert orjson.loads(out)[0]["name"] == "pompe à eau"
    await publishers.start(gateway, "lab-1", demo_server("lab"))
    # The value as JSON: the argument stays ASCII, the answer is not.
    code, out, err = await run_cli("call", "lab-1", "echo", 'text="caf\\u00e9"', "--url", gateway.url, env=ascii_locale)
    assert (code, out, err) == (0, '{\n  "result": "caf\\u00e9"\n}\n', "")
    # A name typed as it is: the terminal sends UTF-8, which Python reads as escapes under this locale.
    code, out, err = await run_cli("call", "pompe à eau", "add", "a=1", "b=2", "--url", gateway.url, env=ascii_locale)
    assert (code, out, err) == (0, '{\n  "result": 3\n}\n', "")


async def test_tools_into_a_pipe_keeps_each_description_on_one_line(
    gateway: GatewayServer, publishers: Publishers
) -> None:
    server = MCPServer("wordy")
    description = "Measure the flow. " + "The sensor averages over the last second of readings. " * 6

    @server.tool(description=description)
    def measure() -> str:
        return "1.0"

    await publishers.start(gateway, "wordy", server)
    code, out, err = await run_cli("tools", "--full", "--url", gateway.url, "wordy", env={"COLUMNS": "40"})
    assert (code, err) == (0, "")
    assert out.splitlines() == ["measure", "    " + " ".join(description.split())]


async def test_approve_with_nothing_waiting_leaves_stdout_empty(governed: tuple[GatewayServer, Path]) -> None:
    server, directory = governed
    operator = str(directory / "operator.token")
    code, out, err = await run_cli("approve", "--url", server.url, "--token-file", operator)
    assert (code, out, err) == (0, "", "mcp-gateway approve: No call waits for an approval you may give.\n")


async def test_a_refused_reload_is_said_on_stderr(reloadable: Reloadable) -> None:
    server = await reloadable("port = 0\n")
    rewrite(server, 'port = 0\nhost = "localhost"\n')
    code, out, err = await run_cli("reload", "--url", server.url)
    assert (code, out) == (1, "")
    assert err.splitlines() == [
        "mcp-gateway reload: Configuration reload refused; nothing was changed:",
        '  host "127.0.0.1" -> "localhost" needs a restart (the listener is bound to it)',
    ]


async def test_policy_reload_without_a_policy_says_the_tool_needs_one(gateway: GatewayServer) -> None:
    code, out, err = await run_cli("policy", "reload", "--url", gateway.url)
    assert (code, out) == (1, "")
    assert "broker_policy_reload exists only on a gateway with a [policy]" in err, err
