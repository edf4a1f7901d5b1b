"""The distribution's metadata (pyproject.toml) and the install lines of the docs (docs/packaging.md).

The distribution is mcp-edge-gateway: `mcp-gateway` on PyPI is another project, so an install line or
a self-reference by that name installs someone else's code. Each dependency floor is the first
release that has what the code uses.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from gateway import __version__

ROOT = Path(__file__).resolve().parents[2]
DISTRIBUTION = "mcp-edge-gateway"
OTHER_PROJECT = "mcp-gateway"  # on PyPI: "A gateway for MCP servers", with its own `mcp-gateway` command

# An install command that names PyPI's mcp-gateway: `pip install 'mcp-gateway[provider]'`, `pip install -U mcp-gateway`.
INSTALLS_THE_OTHER_PROJECT = re.compile(r"pip3? install(?:\s+-{1,2}[\w-]+)*\s+['\"]?mcp-gateway(?![\w.-]|/)")

# Distribution -> (lowest release the code works with, what it needs from that release).
FLOORS = {
    "aiohttp": ("3.14", "web.RequestKey (gateway/http_answers.py, gateway/policy/request_principal.py)"),
    "esptool": ("5.4", "the logger in esp-pylib (gateway/flash/board.py)"),
    "esp-pylib": ("1.0", "esp_pylib.logger, imported by gateway/flash/board.py"),
    "cobs": ("1.2.1", "cobs.max_encoded_length (gateway/southbound/serial/framing.py)"),
    "cryptography": ("43", "what esptool 5.4 requires"),
}


def pyproject() -> dict[str, Any]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))


def requirements() -> list[Requirement]:
    project = pyproject()["project"]
    extras = [line for lines in project["optional-dependencies"].values() for line in lines]
    return [Requirement(line) for line in [*project["dependencies"], *extras]]


def lowest_allowed(requirement: Requirement) -> Version | None:
    floors = [Version(spec.version) for spec in requirement.specifier if spec.operator in (">=", "==", "~=")]
    return max(floors, default=None)


def test_the_distribution_is_mcp_edge_gateway_and_the_command_mcp_gateway() -> None:
    project = pyproject()["project"]
    assert project["name"] == DISTRIBUTION
    assert project["scripts"] == {"mcp-gateway": "gateway.cli:main"}


def test_no_requirement_names_the_other_projects_distribution() -> None:
    named = [str(req) for req in requirements() if canonicalize_name(req.name) == OTHER_PROJECT]
    assert named == []
    dev = [Requirement(line) for line in pyproject()["project"]["optional-dependencies"]["dev"]]
    assert any(req.name == DISTRIBUTION and req.extras == {"test"} for req in dev)


def install_texts() -> list[Path]:
    docs = sorted((ROOT / "docs").glob("*.md"))
    scripts = sorted(path for folder in ("scripts", ".ci") for path in (ROOT / folder).iterdir() if path.is_file())
    code = sorted((ROOT / "gateway").rglob("*.py"))
    return [ROOT / "README.md", *docs, *scripts, *code]


def test_no_install_line_installs_the_other_projects_distribution() -> None:
    found = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
        for path in install_texts()
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1)
        if INSTALLS_THE_OTHER_PROJECT.search(line)
    ]
    assert found == []


@pytest.mark.parametrize(
    ("line", "installs_it"),
    [
        ("pip install 'mcp-gateway[provider]'", True),
        ("pip install -U mcp-gateway", True),
        ("pip install mcp-gateway", True),
        ("pip install '/srv/mcp-gateway[provider]'", False),
        ("pip install mcp-gateway/", False),
        ("pip install 'mcp-edge-gateway[provider]'", False),
        ("pip install mcp-gateway-other", False),
    ],
)
def test_the_install_line_pattern(line: str, installs_it: bool) -> None:
    assert bool(INSTALLS_THE_OTHER_PROJECT.search(line)) is installs_it


@pytest.mark.parametrize("name", sorted(FLOORS))
def test_each_dependency_floor_has_what_the_code_uses(name: str) -> None:
    needed, why = FLOORS[name]
    declared = [req for req in requirements() if canonicalize_name(req.name) == name]
    assert declared, f"{name} is imported by the gateway but not declared ({why})"
    for requirement in declared:
        floor = lowest_allowed(requirement)
        assert floor is not None and floor >= Version(needed), f"{requirement}: below {needed} lacks {why}"


def test_the_build_needs_a_setuptools_that_reads_the_spdx_licence() -> None:
    # license = "Apache-2.0" (PEP 639) is read from setuptools 77 on; older ones refuse the string.
    (setuptools,) = [Requirement(line) for line in pyproject()["build-system"]["requires"]]
    assert setuptools.name == "setuptools"
    floor = lowest_allowed(setuptools)
    assert floor is not None and floor >= Version("77")


def test_the_licence_file_is_the_apache_license_and_ships() -> None:
    project = pyproject()["project"]
    assert project["license"] == "Apache-2.0"
    assert project["license-files"] == ["LICENSE"]
    text = (ROOT / "LICENSE").read_text(encoding="utf-8")
    assert "Apache License" in text and "Version 2.0, January 2004" in text
    assert "END OF TERMS AND CONDITIONS" in text


def test_the_package_says_the_version_the_distribution_has() -> None:
    # `pip install -U` upgrades only to a higher version: both places are raised together.
    assert pyproject()["project"]["version"] == __version__
