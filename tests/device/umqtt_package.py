"""umqtt.simple for the device tests, taken from PyPI the way `mip install umqtt.simple` puts it on a board.

It is never copied into this repository. The PyPI package `micropython-umqtt.simple` is a bare sdist
in micropython-lib's old upip format (the module and PKG-INFO, no setup.py or pyproject.toml), so
`pip download` stops with "does not appear to be a Python project" before saving it. The file is
therefore found the way pip finds it, through the package index's simple API (PEP 691 JSON, PEP 503
HTML as the fallback; PIP_INDEX_URL is honoured), checked against the pinned SHA-256 and unpacked.
The folder that holds `umqtt/simple.py` goes on MICROPYPATH. The archive is kept in pytest's cache
directory, so repeated runs do not download it again.

API: umqtt_library(cache_dir: Path) -> Path   the folder to put on MICROPYPATH; fails the test
     (never skips it) when the index cannot be reached or the file is not the pinned one.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import tarfile
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

PROJECT = "micropython-umqtt-simple"  # the normalised name (PEP 503)
VERSION = "1.3.4"
FILENAME = f"micropython-umqtt.simple-{VERSION}.tar.gz"
SHA256 = "b6a2520239e3992c63a7de9370ee9b3d9d27819a90359c521f1c0f7ccab8d12f"
MODULE = "umqtt/simple.py"
_TIMEOUT_S = 30


def _index_url() -> str:
    return os.environ.get("PIP_INDEX_URL", "https://pypi.org/simple").rstrip("/")


def _file_url() -> str:
    page = f"{_index_url()}/{PROJECT}/"
    request = urllib.request.Request(page, headers={"Accept": "application/vnd.pypi.simple.v1+json, text/html;q=0.1"})
    with urllib.request.urlopen(request, timeout=_TIMEOUT_S) as response:
        kind = response.headers.get("Content-Type", "")
        body = response.read()
    if "json" in kind:
        for entry in json.loads(body)["files"]:
            if entry["filename"] == FILENAME:
                return urllib.parse.urljoin(page, str(entry["url"]))
    else:
        for href in re.findall(rb'href="([^"]+)"', body):
            url: str = href.decode()
            if urllib.parse.urlsplit(url).path.endswith("/" + FILENAME):
                return urllib.parse.urljoin(page, url)
    raise LookupError(f"{FILENAME} is not listed on {page}")


def _archive(cache_dir: Path) -> bytes:
    cached = cache_dir / FILENAME
    if cached.exists() and hashlib.sha256(cached.read_bytes()).hexdigest() == SHA256:
        return cached.read_bytes()
    url = _file_url()
    with urllib.request.urlopen(url, timeout=_TIMEOUT_S) as response:
        data: bytes = response.read()
    digest = hashlib.sha256(data).hexdigest()
    if digest != SHA256:
        raise ValueError(f"{url} has SHA-256 {digest}, not the pinned {SHA256}")
    cached.write_bytes(data)
    return data


def umqtt_library(cache_dir: Path) -> Path:
    library = cache_dir / f"umqtt-{VERSION}"
    if (library / MODULE).exists():
        return library
    try:
        data = _archive(cache_dir)
    except (OSError, LookupError, ValueError, KeyError) as exc:
        pytest.fail(f"could not fetch {PROJECT} {VERSION} from {_index_url()}: {exc}", pytrace=False)
    with tarfile.open(fileobj=io.BytesIO(data)) as archive:
        member = archive.extractfile(f"micropython-umqtt.simple-{VERSION}/{MODULE}")
        assert member is not None
        source = member.read()
    (library / "umqtt").mkdir(parents=True, exist_ok=True)
    (library / MODULE).write_bytes(source)
    return library
