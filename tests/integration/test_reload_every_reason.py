"""A refused reload names every reason at once: a file with an invalid value is also read unvalidated, so a
restart-only key it changes is named beside the validation error, not one reload later."""

from __future__ import annotations

import signal
from pathlib import Path

import orjson

from gateway.app import GatewayServer
from gateway.reload import ConfigSource
from tests.integration.test_reload import Reloadable, reloadable, rewrite
from tests.support.gateway_process import gateway_process, run_cli

__all__ = ["reloadable"]  # the fixture, used by name

RUNNING = 'port = 0\n[groups.x]\nslots = ["pump-*"]\n'
INVALID_GROUP = "setting 'groups.x.enabled'"
PORT_CHANGE = "port 0 -> 47511 needs a restart (the listener is bound to it)"


async def test_an_invalid_value_and_a_restart_only_change_are_both_named(reloadable: Reloadable) -> None:
    server = await reloadable(RUNNING)
    running = server.config
    # event_loop as it runs: a restart-only key set to its running value is no reason.
    rewrite(server, 'port = 47511\nevent_loop = "auto"\n[groups.x]\nslots = ["pump-*"]\nenabled = "yes"\n')
    report = await server.reload()
    assert report.outcome == "refused"
    assert len(report.refusals) == 2, report.refusals
    assert INVALID_GROUP in report.refusals[0]
    assert report.refusals[1] == PORT_CHANGE
    assert server.config is running

    # Fixed as the report says (the port as it runs, the group's flag a boolean), the reload applies.
    rewrite(server, RUNNING + "enabled = false\n")
    assert (await server.reload()).outcome == "applied"


async def test_what_the_validation_error_already_names_or_the_file_does_not_change_is_not_named_again(
    reloadable: Reloadable,
) -> None:
    server = await reloadable(RUNNING)
    cases = {
        # A restart-only key of the wrong type: the validation error names it, once.
        'port = "47511"\n[groups.x]\nslots = ["pump-*"]\n': ["setting 'port'"],
        # The same port and the same [limits] as running: only the invalid value.
        'port = 0\n[limits]\nmax_slots = 1024\n[groups.x]\nslots = ["pump-*"]\nenabled = "yes"\n': [INVALID_GROUP],
        # A file that does not parse: its syntax error is all that can be named.
        'port = 47511\n[groups.x\nslots = ["pump-*"]\n': ["invalid TOML"],
    }
    for text, reasons in cases.items():
        rewrite(server, text)
        report = await server.reload()
        assert report.outcome == "refused", text
        assert len(report.refusals) == len(reasons), (text, report.refusals)
        for reason, refusal in zip(reasons, report.refusals, strict=True):
            assert reason in refusal, (text, report.refusals)


async def test_a_key_a_flag_sets_is_not_read_from_the_file(tmp_path: Path) -> None:
    # `run --port 0` wins over the file's port at every reload, as it did at start.
    path = tmp_path / "gateway.toml"
    path.write_text(RUNNING)
    source = ConfigSource(str(path), flags={"port": 0}, environ={})
    server = GatewayServer(source.load(), source=source)
    await server.start()
    try:
        path.write_text('port = 47511\nsession_answers = "json"\n[groups.x]\nslots = ["pump-*"]\nenabled = "yes"\n')
        report = await server.reload()
        assert report.outcome == "refused"
        assert len(report.refusals) == 2, report.refusals
        assert INVALID_GROUP in report.refusals[0]
        assert report.refusals[1].startswith('session_answers "sse" -> "json" needs a restart'), report.refusals
    finally:
        await server.stop()


async def test_sighup_and_mcp_gateway_reload_name_both_reasons(tmp_path: Path) -> None:
    config = tmp_path / "gateway.toml"
    config.write_text('port = 0\n[logging]\nformat = "json"\n[groups.x]\nslots = ["pump-*"]\n')
    async with gateway_process("--config", str(config)) as gateway:
        config.write_text('port = 47511\n[logging]\nformat = "json"\n[groups.x]\nslots = ["pump-*"]\nenabled = "yes"\n')
        mark = len(gateway.lines)
        gateway.process.send_signal(signal.SIGHUP)
        line = orjson.loads(await gateway.wait_line("configuration reload", after=mark))
        assert line["level"] == "error"
        assert INVALID_GROUP in line["msg"]
        assert line["msg"].endswith(f"; {PORT_CHANGE}")
        code, out, err = await run_cli("reload", "--url", gateway.url)
        assert (code, out) == (1, "")
        assert INVALID_GROUP in err
        assert PORT_CHANGE in err
