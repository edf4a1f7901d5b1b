"""Say, loudly, when npm has a newer conformance suite than the ones CI pins; never fail because of it.

    python -m tests.conformance.newer_suite    # scripts/test runs it after the conformance run

CI runs the versions pinned in .ci/install-conformance (and `SUITES` in run.py), so a new alpha of
the suite cannot turn main red by itself. The price is that a newer suite goes unnoticed; this check
is that notice. It asks npm (`npm view @modelcontextprotocol/conformance versions --json`) and prints
`!!! NEWER CONFORMANCE SUITE: ...` for every pinned line (0.1.x, 0.2.x) with a newer version, and
for a newer line altogether. Moving the pin is a deliberate change (docs/conformance.md). Exit status
is 0 whatever happens: an unreachable registry is reported in one line and changes nothing.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterable, Sequence

from tests.conformance.run import SUITES

PACKAGE = "@modelcontextprotocol/conformance"
NPM_TIMEOUT_S = 30
LABEL = "!!! NEWER CONFORMANCE SUITE"
VERSION = re.compile(r"^(\d+)\.(\d+)\.(\d+)(?:-([0-9A-Za-z.-]+))?(?:\+[0-9A-Za-z.-]+)?$")

# A semver precedence key: (major, minor, patch, release?, prerelease identifiers).
Key = tuple[int, int, int, int, tuple[tuple[int, int, str], ...]]


def version_key(version: str) -> Key | None:
    """Semver precedence (a release is newer than its prereleases; numeric identifiers compare as
    numbers and below alphanumeric ones); None for anything that is not a version."""
    match = VERSION.match(version)
    if match is None:
        return None
    major, minor, patch, pre = match.groups()
    identifiers = tuple(
        (0, int(part), "") if part.isdigit() else (1, 0, part) for part in (pre or "").split(".") if part
    )
    return int(major), int(minor), int(patch), 0 if pre else 1, identifiers


def line_of(version: str) -> tuple[int, int]:
    key = version_key(version)
    assert key is not None, version
    return key[0], key[1]


def newer_in_line(pinned: str, published: Iterable[str]) -> list[str]:
    """Published versions of the pinned one's line (same major.minor) that are newer, oldest first.
    Prereleases count only while the pin is a prerelease itself (0.2.0-alpha.12 -> alpha.13 or 0.2.0;
    0.1.16 -> 0.1.17, not 0.1.17-beta.1)."""
    pin = version_key(pinned)
    assert pin is not None, pinned
    found = []
    for version in published:
        key = version_key(version)
        if key is None or key[:2] != pin[:2] or key <= pin:
            continue
        if pin[3] == 1 and key[3] == 0:
            continue
        found.append((key, version))
    return [version for _, version in sorted(found)]


def newer_lines(pinned: Sequence[str], published: Iterable[str]) -> list[str]:
    """The newest version of each line above every pinned line (0.3.x when 0.1 and 0.2 are pinned)."""
    top = max(line_of(version) for version in pinned)
    newest: dict[tuple[int, int], tuple[Key, str]] = {}
    for version in published:
        key = version_key(version)
        if key is None or key[:2] <= top:
            continue
        if key[:2] not in newest or key > newest[key[:2]][0]:
            newest[key[:2]] = (key, version)
    return [version for _, (_, version) in sorted(newest.items())]


def published_versions() -> list[str]:
    """Every version npm knows of the suite; raises OSError/ValueError when it cannot say."""
    try:
        done = subprocess.run(
            ["npm", "view", PACKAGE, "versions", "--json", "--fetch-retries=0", "--fetch-timeout=15000"],
            capture_output=True,
            text=True,
            timeout=NPM_TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise OSError(f"npm view ran over {NPM_TIMEOUT_S}s") from exc
    if done.returncode != 0:
        detail = next((line for line in done.stderr.splitlines() if "npm error" in line), done.stderr.strip())
        raise OSError(f"npm view exited {done.returncode}: {detail[:200]}")
    versions = json.loads(done.stdout)
    if isinstance(versions, str):  # a package with a single version prints a string
        versions = [versions]
    if not isinstance(versions, list) or not all(isinstance(v, str) for v in versions):
        raise ValueError(f"npm view printed no version list: {done.stdout[:200]!r}")
    return versions


def notices(published: Sequence[str]) -> list[str]:
    lines = []
    for suite in SUITES:
        newer = newer_in_line(suite.version, published)
        if newer:
            lines.append(
                f"{LABEL}: {PACKAGE} {newer[-1]} is out; CI runs the pinned {suite.version} ({suite.era}). "
                f"Newer in that line: {', '.join(newer)}"
            )
    for version in newer_lines([suite.version for suite in SUITES], published):
        lines.append(f"{LABEL}: {PACKAGE} {version} starts a line CI does not run yet")
    if lines:
        lines.append(
            f"{LABEL}: to move, change the pin in .ci/install-conformance and SUITES in tests/conformance/run.py, "
            "run `python -m tests.conformance.run`, and update docs/conformance.md (CI stays on the pin until then)"
        )
    return lines


def main() -> int:
    pinned = ", ".join(suite.version for suite in SUITES)
    try:
        published = published_versions()
    except (OSError, ValueError) as exc:
        print(f"conformance: could not ask npm whether a newer suite than {pinned} is out ({exc}); CI keeps the pin")
        return 0
    lines = notices(published)
    for line in lines:
        print(line)
    if not lines:
        print(f"conformance: the pinned suites ({pinned}) are the newest of their lines on npm")
    return 0


if __name__ == "__main__":
    sys.exit(main())
