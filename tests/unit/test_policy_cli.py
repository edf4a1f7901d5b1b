"""`mcp-gateway policy check|explain` (gateway/cli/policy.py) through `main([...])` and the console command."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from gateway.cli import main

POLICY = """
[roles.observer]
capabilities = ["mcp.tools.list", "mcp.tools.call", "tool.observe"]
[roles.operator]
inherits = ["observer"]
capabilities = ["tool.control"]

[[assign]]
principal = "token:agent-1"
role = "observer"
resources = ["/site1/**"]

[[assign]]
principal = "group:operators"
role = "operator"
resources = ["/site1/line2/*"]

[[deny]]
principal = "token:agent-1"
capabilities = ["tool:stop"]
resources = ["/site1/line2/pump-3"]

[[limits]]
resources = ["/site1/line2/pump-1"]
tool = "set_speed"
argument = "speed_rpm"
min = 300
max = 2000
action = "clamp"

[[limits]]
resources = ["/site1/**"]
tool = "set_speed"
argument = "mode"
allowed = ["low", "high"]

[[resource_patterns]]
slots = "pump-*"
path = "/site1/line2/{slot}"
"""

BROKEN = """
[roles.observer]
capabilities = ["tool.observ"]
[[assign]]
principal = "token:agent-1"
role = "operater"
resources = ["site1/**"]
[[limits]]
resources = ["/x"]
tool = "t"
argument = "a"
min = 5
max = 1
"""


pytestmark = pytest.mark.usefixtures("cli_environment")


@pytest.fixture
def policy_file(tmp_path: Path) -> Path:
    path = tmp_path / "policy.toml"
    path.write_text(POLICY, encoding="utf-8")
    return path


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_check_summarises_a_usable_policy(capsys: pytest.CaptureFixture[str], policy_file: Path) -> None:
    assert run(capsys, "policy", "check", str(policy_file)) == (
        0,
        "policy OK: 2 roles, 2 assignments, 1 deny, 2 limits\n",
        "",
    )


def test_check_warns_of_a_tool_rule_written_like_a_pattern(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = tmp_path / "speaker.toml"
    path.write_text(
        '[roles.maker]\ncapabilities = ["mcp.tools.list", "mcp.tools.call", "tool.control"]\n'
        '[[assign]]\nprincipal = "*"\nrole = "maker"\nresources = ["/**"]\n'
        '[[deny]]\nprincipal = "*"\ncapabilities = ["tool:self.audio_speaker.*"]\nresources = ["/**"]\n',
        encoding="utf-8",
    )
    code, out, err = run(capsys, "policy", "check", str(path))
    assert (code, out) == (0, "policy OK: 1 role, 1 assignment, 1 deny, 0 limits\n")
    assert err.startswith(
        'mcp-gateway policy check: warning: deny[0].capabilities[0]: "tool:self.audio_speaker.*" looks'
    )


def test_check_lists_every_mistake_and_exits_1(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = tmp_path / "broken.toml"
    path.write_text(BROKEN, encoding="utf-8")
    code, out, err = run(capsys, "policy", "check", str(path))
    assert (code, out) == (1, "")
    assert err.splitlines() == [
        f"mcp-gateway policy check: policy file {path}: 4 errors:",
        '  roles.observer.capabilities[0]: unknown capability "tool.observ" (capabilities: mcp.tools.list, '
        "mcp.tools.call, mcp.resources.read, mcp.prompts.read, mcp.completion.use, tool.observe, tool.control, "
        'broker.audit.read, tool:<name>); did you mean "tool.observe"?',
        '  assign[0].role: unknown role "operater" (roles: observer)',
        '  assign[0].resources[0]: pattern "site1/**" must start with "/", e.g. "/site1/line2/pump-1"',
        "  limits[0]: min 5 is above max 1",
    ]


def test_check_of_a_missing_file_says_so(capsys: pytest.CaptureFixture[str]) -> None:
    """A file the check cannot open is a usage error (docs/cli.md, exit codes), not a finding."""
    assert run(capsys, "policy", "check", "nowhere.toml") == (
        2,
        "",
        "mcp-gateway policy check: policy file nowhere.toml: not found (a relative path is read from the working "
        f"directory: here {Path('nowhere.toml').absolute()})\n",
    )


def test_explain_a_denied_call(capsys: pytest.CaptureFixture[str], policy_file: Path) -> None:
    code, out, err = run(
        capsys, "policy", "explain", "--principal", "token:agent-1", "--slot", "pump-3", "--tool", "stop",
        "--policy", str(policy_file),
    )  # fmt: skip
    assert (code, err) == (1, "")
    assert out.splitlines() == [
        'denied: Forbidden: token:agent-1 may not call tool "stop" on /site1/line2/pump-3 (deny[0]); '
        "ask the operator for tool:stop or tool.control there",
        "caller: token:agent-1",
        'resource: /site1/line2/pump-3 (slot "pump-3", by resource_patterns[0])',
        "capability: mcp.tools.call, and tool:stop or tool.control (a control tool)",
        "rules:",
        "  assign[0] token:agent-1 as observer on /site1/**: applies, grants mcp.tools.call",
        "  assign[1] group:operators as operator on /site1/line2/*: not this caller",
        "  deny[0] token:agent-1 tool:stop on /site1/line2/pump-3: applies, denies tool:stop",
        'limits on "stop": none',
    ]


def test_explain_an_allowed_call_with_groups_and_its_arguments(
    capsys: pytest.CaptureFixture[str], policy_file: Path
) -> None:
    code, out, _ = run(
        capsys, "policy", "explain", "--principal", "user:alice", "--principal", "group:operators",
        "--slot", "pump-1", "--tool", "set_speed", "--args", '{"speed_rpm": 2500, "mode": "low"}',
        "--policy", str(policy_file),
    )  # fmt: skip
    assert code == 0
    lines = out.splitlines()
    assert lines[0] == 'allowed: user:alice may call tool "set_speed" on /site1/line2/pump-1 (assign[1])'
    assert "caller: group:operators, user:alice" in lines
    assert 'limits on "set_speed":' in lines
    assert "  limits[0] on /site1/line2/pump-1: applies; speed_rpm min 300, max 2000 (clamp)" in lines
    assert '  limits[1] on /site1/**: applies; mode allowed ["low", "high"] (refuse)' in lines
    assert lines[-1] == "arguments: clamped: speed_rpm 2500 -> 2000 (policy limits[0])"


def test_explain_says_when_the_arguments_would_be_refused(
    capsys: pytest.CaptureFixture[str], policy_file: Path
) -> None:
    code, out, _ = run(
        capsys, "policy", "explain", "--principal", "group:operators", "--slot", "pump-1", "--tool", "set_speed",
        "--args", '{"speed_rpm": 1000, "mode": "turbo"}', "--policy", str(policy_file),
    )  # fmt: skip
    assert code == 1  # the call would fail, as a denied one does
    assert out.splitlines()[0].startswith("allowed: ")  # by the rules; the limits refuse the arguments
    assert out.splitlines()[-1].startswith('arguments: refused: Argument "mode" = "turbo" is not allowed')


def test_explain_an_observe_tool_and_another_method(capsys: pytest.CaptureFixture[str], policy_file: Path) -> None:
    code, out, _ = run(
        capsys, "policy", "explain", "--principal", "token:agent-1", "--slot", "pump-3", "--tool", "read",
        "--read-only", "--policy", str(policy_file),
    )  # fmt: skip
    assert code == 0
    assert "capability: mcp.tools.call, and tool:read or tool.observe (an observe tool)\n" in out
    code, out, _ = run(
        capsys, "policy", "explain", "--principal", "anonymous", "--slot", "pump-3", "--method", "tools/list",
        "--policy", str(policy_file),
    )  # fmt: skip
    assert code == 1
    assert out.splitlines()[:4] == [
        "denied: Forbidden: anonymous may not list tools on /site1/line2/pump-3 "
        "(no role of theirs there grants mcp.tools.list); ask the operator for mcp.tools.list there",
        "caller: anonymous",
        'resource: /site1/line2/pump-3 (slot "pump-3", by resource_patterns[0])',
        "capability: mcp.tools.list",
    ]


def test_explain_reads_the_policy_of_the_configuration(
    capsys: pytest.CaptureFixture[str], policy_file: Path, tmp_path: Path
) -> None:
    config = tmp_path / "gateway.toml"
    config.write_text(f'[policy]\nfile = "{policy_file}"\n', encoding="utf-8")
    argv = ["policy", "explain", "--principal", "token:agent-1", "--slot", "pump-2", "--tool", "read", "--read-only"]
    code, out, _ = run(capsys, *argv, "--config", str(config))
    assert code == 0
    assert out.startswith('allowed: token:agent-1 may call tool "read" on /site1/line2/pump-2 (assign[0])\n')
    config.write_text("port = 3001\n", encoding="utf-8")
    assert run(capsys, *argv, "--config", str(config)) == (
        0,
        "no [policy] in the configuration: every request is allowed (authentication and scopes apply)\n",
        "",
    )


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["--principal", "agent-1", "--tool", "x"], '--principal "agent-1" is not a subject'),
        (["--principal", "*", "--tool", "x"], '"*" matches any caller in a rule'),
        (["--principal", "token:a"], "--tool is needed to explain a tools/call"),
        (["--principal", "token:a", "--tool", "x", "--args", "{speed"], "--args is not JSON"),
    ],
)
def test_explain_refuses_flags_it_cannot_use(
    capsys: pytest.CaptureFixture[str], policy_file: Path, argv: list[str], words: str
) -> None:
    code, out, err = run(capsys, "policy", "explain", "--slot", "pump-1", *argv, "--policy", str(policy_file))
    assert (code, out) == (2, "")
    assert err.startswith("mcp-gateway policy explain: ")
    assert words in err


def test_explain_with_a_broken_policy_lists_its_mistakes(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = tmp_path / "broken.toml"
    path.write_text(BROKEN, encoding="utf-8")
    code, out, err = run(
        capsys, "policy", "explain", "--principal", "token:a", "--slot", "x", "--tool", "t", "--policy", str(path)
    )
    assert (code, out) == (2, "")
    assert f"policy file {path}: 4 errors:" in err
    assert 'assign[0].role: unknown role "operater"' in err


def test_explain_takes_a_policy_or_a_configuration_not_both(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as caught:
        main(["policy", "explain", "--principal", "token:a", "--slot", "x", "--policy", "a", "--config", "b"])
    assert caught.value.code == 2
    assert "not allowed with argument" in capsys.readouterr().err


def test_the_console_command_checks_a_policy(policy_file: Path, tmp_path: Path) -> None:
    command = Path(sys.executable).with_name("mcp-gateway")
    done = subprocess.run(
        [command, "policy", "check", str(policy_file)], capture_output=True, text=True, timeout=60, check=False
    )
    assert (done.returncode, done.stdout, done.stderr) == (
        0,
        "policy OK: 2 roles, 2 assignments, 1 deny, 2 limits\n",
        "",
    )
    broken = tmp_path / "broken.toml"
    broken.write_text(BROKEN, encoding="utf-8")
    done = subprocess.run(
        [command, "policy", "check", str(broken)], capture_output=True, text=True, timeout=60, check=False
    )
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr.count("\n  ") == 4


def test_explain_names_the_confirmation_and_the_execution_limits_that_count_the_call(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    policy = tmp_path / "policy.toml"
    policy.write_text(
        POLICY
        + '[[confirm]]\nprincipal = "group:operators"\ncapabilities = ["tool:start"]\nresources = ["/**"]\n'
        + '[[execution_limits]]\nid = "starts"\nmatch = { capability = "tool:start" }\n'
        + "calls = { max = 5, window_ms = 60000 }\n"
        + '[[execution_limits]]\nid = "speeds"\nmatch = { capability = "tool:set_speed" }\nconcurrency = 1\n'
    )
    assert run(capsys, "policy", "check", str(policy))[1] == (
        "policy OK: 2 roles, 2 assignments, 1 deny, 2 limits, 1 confirmation rule, 2 execution limits\n"
    )
    code, out, _ = run(
        capsys, "policy", "explain", "--principal", "group:operators", "--slot", "pump-1", "--tool", "start",
        "--policy", str(policy),
    )  # fmt: skip
    assert code == 0
    lines = out.splitlines()
    assert lines[0].endswith("once a person confirms it (confirm[0])")
    assert (
        'confirmation: confirm[0], by = "caller": a person answers through the caller\'s own client (elicitation), '
        "else another principal approves; an answer or an approval counts for 300 s"
    ) in lines
    assert lines[-1] == "execution limits: starts"


def test_check_and_explain_show_who_confirms(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    policy = tmp_path / "policy.toml"
    confirm = '[[confirm]]\nprincipal = "group:operators"\ncapabilities = ["tool:start"]\nresources = ["/**"]\n'
    policy.write_text(POLICY + confirm + confirm + 'by = "another"\n')
    assert run(capsys, "policy", "check", str(policy))[1] == (
        'policy OK: 2 roles, 2 assignments, 1 deny, 2 limits, 2 confirmation rules (1 by = "another")\n'
    )
    policy.write_text(POLICY + confirm + 'by = "another"\n')
    code, out, _ = run(
        capsys, "policy", "explain", "--principal", "group:operators", "--slot", "pump-1", "--tool", "start",
        "--policy", str(policy),
    )  # fmt: skip
    assert code == 0
    assert (
        'confirmation: confirm[0], by = "another": another principal approves (mcp-gateway approve), never the '
        "caller's own client; an approval counts for 300 s"
    ) in out.splitlines()
