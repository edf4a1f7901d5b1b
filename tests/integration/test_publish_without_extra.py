"""`gateway.publish` on a base install, without the `provider` extra: one error that names the extra.

A fresh interpreter stands for that install: the test hides one module of the extra (None in
sys.modules makes importing it raise ModuleNotFoundError, as a missing package does) and imports the
package the way docs/provider-api.md does.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from gateway import __version__

ROOT = Path(__file__).resolve().parents[2]

PROBE = """
import sys
import orjson
sys.modules[sys.argv[1]] = None
try:
    from gateway.publish import Publisher
except ImportError as error:
    sys.stdout.buffer.write(orjson.dumps({
        "types": [kind.__name__ for kind in type(error).__mro__],
        "name": error.name,
        "message": str(error),
    }))
"""


def import_without(module: str, tmp_path: Path) -> dict[str, object]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", PROBE, module], capture_output=True, cwd=tmp_path, env=env, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr.decode()
    assert done.stdout, "gateway.publish imported although a module it needs was hidden"
    answer: dict[str, object] = orjson.loads(done.stdout)
    return answer


@pytest.mark.parametrize("module", ["anyio", "mcp", "mcp_types"])
def test_a_missing_sdk_module_names_the_extra_and_how_to_install_it(module: str, tmp_path: Path) -> None:
    error = import_without(module, tmp_path)
    assert error["types"][:2] == ["ModuleNotFoundError", "ImportError"]  # type: ignore[index]
    name = str(error["name"])
    assert name.partition(".")[0] == module  # hiding `mcp` stops `import mcp.server` at mcp.server
    message = str(error["message"])
    assert message.startswith("gateway.publish needs the `provider` extra (the mcp SDK), which is not installed")
    assert f"(no module named {name!r})" in message
    assert "pip install '/path/to/checkout[provider]'" in message
    assert f"pip install '/path/to/mcp_edge_gateway-{__version__}-py3-none-any.whl[provider]'" in message
    assert "docs/packaging.md" in message


def test_a_missing_module_outside_the_extra_is_not_blamed_on_it(tmp_path: Path) -> None:
    error = import_without("aiohttp", tmp_path)
    assert error["name"] == "aiohttp"
    assert "provider" not in str(error["message"])
