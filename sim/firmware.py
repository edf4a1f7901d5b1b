"""The device's own pump-1 modules, imported under CPython: the simulator runs the board's code.

pump1 and mcpdevice live in device/micropython; the distribution installs them as top-level packages
(pyproject maps the folder), so the same import works from a checkout and from an installed wheel.
The tool schema is device/schemas/pump-1.json, shipped inside this package as sim/schemas/pump-1.json
(a link in the repository, the file itself in a wheel). These modules carry no annotations: to mypy
they are Any, and the simulator types the few values it takes from them at this boundary.
"""

from __future__ import annotations

import importlib.util
from importlib import resources
from pathlib import Path
from typing import Any

import orjson
import pump1
from mcpdevice import dispatcher, provider, schema_index, websocket
from mcpdevice import telemetry as board_telemetry
from pump1 import controller, hardware_sim, physics, tools

from gateway.core.schema_hash import tools_hash


class _NoCollect:
    """The `gc` of the simulator's copy of mcpdevice.telemetry. Its report() collects after each send
    to keep a board's small heap in one piece; under CPython a full collection per notification costs
    the simulator 20-40 times the CPU of the rest of its telemetry, and CPython collects on its own."""

    @staticmethod
    def collect() -> int:
        return 0


def _simulator_telemetry() -> Any:
    """mcpdevice.telemetry loaded once more, as the simulator's own module, its gc _NoCollect: the
    board's code unchanged (its heap has little room for a check), the shared module untouched."""
    spec = importlib.util.spec_from_file_location("sim.board_telemetry", board_telemetry.__file__)
    assert spec is not None and spec.loader is not None, board_telemetry.__file__
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.gc = _NoCollect  # type: ignore[attr-defined]
    return module


telemetry: Any = _simulator_telemetry()
"""mcpdevice.telemetry as the simulator runs it (_simulator_telemetry)."""
FAULT_CONDITIONS: tuple[str, ...] = tuple(physics.FAULTS)  # dry_run, sensor_failure, overtemp
TRIP_C: float = float(physics.TRIP_C)
SERVER_INFO: dict[str, str] = {"name": str(pump1.SERVER_NAME), "version": str(pump1.FIRMWARE_VERSION)}
INSTRUCTIONS: str = str(pump1.INSTRUCTIONS)
BOARD_FRAME_MAX = 4096  # the board's default frame cap: tools/list is paged exactly as a board pages it


def schema_file() -> Path:
    return Path(str(resources.files("sim") / "schemas" / "pump-1.json"))


def schema_hash(path: Path) -> str:
    """The canonical hash of the tools the simulator serves, for its hello (docs/pump-1.md "Schema hash")."""
    tools_array: list[dict[str, Any]] = orjson.loads(path.read_bytes())
    return tools_hash(tools_array)


def load_registry(path: Path, frame_max: int = BOARD_FRAME_MAX) -> Any:
    """mcpdevice's ToolRegistry over the schema file; raises ValueError naming what is wrong."""
    return schema_index.load(str(path), dispatcher.tool_budget(frame_max))


def provider_url(gateway_url: str, slot: str) -> str:
    """ws(s)://host:port/provider/<slot>, from an http(s):// or ws(s):// base, as the board builds it."""
    return str(websocket.provider_url(gateway_url, slot))


def register_frame(hello: dict[str, Any], slot: str | None = None) -> bytes:
    """The first frame on a link: notifications/register with aggregate true and the hello; links without a
    URL (MQTT's status topic, serial) name their slot in it."""
    frame: bytes = (
        provider.register_frame(hello, True, slot) if slot is not None else provider.register_frame(hello, True)
    )
    return frame


def assemble(answer: Any) -> bytes | None:
    """One dispatcher answer (bytes, parts of a paged tools/list, or None) as one frame."""
    frame: bytes | None = dispatcher.assemble(answer)
    return frame


__all__ = ["controller", "dispatcher", "hardware_sim", "physics", "telemetry", "tools"]
