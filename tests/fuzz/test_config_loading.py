"""Configuration loading (gateway/config.py) from arbitrary TOML files and MCP_GATEWAY_* variables.

The configuration comes from the operator, not a stranger, but a plant appliance must fail closed on
anything: whatever the file and the environment hold, loading either gives a configuration or raises
ConfigError with a message naming the key or the file; never another exception (a traceback instead
of a message, or a half-checked configuration). What `config check` and `run` build from a loaded
configuration (the client-authentication verifiers, reading token and key files) follows the same rule.

Documents are generated from the configuration model itself (every section and key, at any depth),
with values of every TOML type, paths to real, missing and odd files, and unknown keys; then perhaps
mangled as bytes.
"""

from __future__ import annotations

import atexit
import json
import math
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any, get_args, get_origin

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import BaseModel

from gateway.config import ConfigError, GatewayConfig, load_config, masked_dump
from gateway.policy.client_auth import check_client_auth
from gateway.policy.tls import ServerTls
from gateway.telemetry.metrics import Metrics
from tests.fuzz import strategies as fz
from tests.fuzz.budget import fuzz_settings, tally

FOLDER = Path(tempfile.mkdtemp(prefix="mcpgw-fuzz-config-"))
atexit.register(shutil.rmtree, FOLDER, ignore_errors=True)
SECRET_FILE = FOLDER / "secret"
SECRET_FILE.write_text("a-long-enough-secret-0123456789\n")
BINARY_FILE = FOLDER / "binary"
BINARY_FILE.write_bytes(b"\xff\xfe\x00secret")
EMPTY_FILE = FOLDER / "empty"
EMPTY_FILE.write_text("")
TOKEN_FILE = FOLDER / "tokens.toml"
TOKEN_FILE.write_text('[[tokens]]\nname = "x"\nscopes = []\nsha256 = "' + "ab" * 32 + '"\n')
TOKEN_FILE.chmod(0o600)
SECRET_ENV = "MCPGW_FUZZ_SECRET"
SHORT_ENV = "MCPGW_FUZZ_SHORT"

paths = st.sampled_from(
    (
        str(SECRET_FILE),
        str(BINARY_FILE),
        str(EMPTY_FILE),
        str(TOKEN_FILE),
        str(FOLDER),
        str(FOLDER / "missing"),
        str(SECRET_FILE / "below-a-file"),
        "x" * 300,
        str(FOLDER / ("n" * 300)),
        "with\x00nul",
        "",
        "relative/missing",
    )
)
"""Files the configuration may name: never a device or a pipe, which a read would block on."""
env_names = st.sampled_from((SECRET_ENV, SHORT_ENV, "MCPGW_FUZZ_UNSET", "", "1BAD", "A=B", "with\x00nul"))


def scalar_values() -> st.SearchStrategy[Any]:
    return st.one_of(
        st.booleans(),
        st.integers(min_value=-(2**63), max_value=2**63 - 1),
        st.sampled_from((0, 1, -1, 65535, 65536, 2**31, 10**18)),
        st.floats(),
        fz.strings,
        st.sampled_from(("127.0.0.1", "0.0.0.0", "::", "localhost", "https://auth.plant.lan", "http://10.0.0.1/x")),
        st.sampled_from(("none", "shared", "identities", "always", "reject", "liveness", "debug", "RS256", "HS256")),
        st.none(),  # not TOML: the file is invalid
    )


def values_for(annotation: Any, name: str, depth: int) -> st.SearchStrategy[Any]:
    """Values for a field: mostly of its own shape (so validation goes deep), sometimes anything."""
    anything = st.one_of(scalar_values(), st.lists(scalar_values(), max_size=3))
    if name in ("file", "cert_file", "key_file", "client_ca_file", "jwks_file", "headers_file", "ca_file", "cwd"):
        return st.one_of(paths, anything)
    if name == "token_files":
        return st.one_of(st.lists(paths, max_size=2), anything)
    if name == "env" and annotation is not dict:
        return st.one_of(env_names, anything)
    if name == "sha256":
        return st.one_of(st.sampled_from(("ab" * 32, "AB" * 32, "ab" * 31, "zz" * 32)), anything)
    options = [t for t in get_args(annotation) if t is not type(None)] or [annotation]
    strategies: list[st.SearchStrategy[Any]] = [anything]
    for option in options:
        origin = get_origin(option)
        if isinstance(option, type) and issubclass(option, BaseModel) and depth < 5:
            strategies.append(documents(option, depth + 1))
        elif origin is list:
            (item,) = get_args(option) or (Any,)
            strategies.append(st.lists(values_for(item, name, depth + 1), max_size=3))
        elif origin is dict:
            _, item = get_args(option) or (str, Any)
            keys = st.one_of(fz.slot_names, st.sampled_from(("pump-*", "_all", "*", "tools", "x")))
            strategies.append(st.dictionaries(keys, values_for(item, name, depth + 1), max_size=3))
    return st.one_of(*strategies)


def documents(model: type[BaseModel] = GatewayConfig, depth: int = 0) -> st.SearchStrategy[dict[str, Any]]:
    """A table for `model`: some of its keys with values of their shape, perhaps an unknown key."""
    fields = {name: values_for(field.annotation, name, depth) for name, field in model.model_fields.items()}
    return st.fixed_dictionaries(
        {},
        optional={**fields, "unknown_key": scalar_values()} if depth == 0 else fields,
    )


def toml_value(value: Any) -> str:
    """TOML text for a value; anything TOML cannot hold (null, huge integers) makes an invalid file."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(item) for item in value) + "]"
    return "{" + ", ".join(f"{json.dumps(str(key))} = {toml_value(item)}" for key, item in value.items()) + "}"


def toml_document(document: dict[str, Any]) -> bytes:
    text = "".join(f"{json.dumps(key)} = {toml_value(value)}\n" for key, value in document.items())
    return text.encode("utf-8", "surrogatepass")


def setting_paths(model: type[BaseModel] = GatewayConfig, prefix: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    for name, field in model.model_fields.items():
        path = (*prefix, name)
        yield path
        for option in (field.annotation, *get_args(field.annotation)):
            if isinstance(option, type) and issubclass(option, BaseModel):
                yield from setting_paths(option, path)


SETTINGS = sorted(set(setting_paths()))
env_values = st.one_of(
    scalar_values().map(lambda value: json.dumps(value) if not isinstance(value, str) else value),
    st.lists(scalar_values(), max_size=3).map(json.dumps),
    st.text(max_size=20).filter(lambda text: "\x00" not in text),
)


def variable(path: tuple[str, ...]) -> str:
    return "MCP_GATEWAY_" + "__".join(part.upper() for part in path)


@st.composite
def environments(draw: st.DrawFn) -> dict[str, str]:
    """MCP_GATEWAY_* variables: settings, often together with a variable for a section above them
    (MCP_GATEWAY_LIMITS next to MCP_GATEWAY_LIMITS__MAX_SLOTS), and names that are no setting."""
    environ: dict[str, str] = {}
    for _ in range(draw(st.integers(min_value=0, max_value=4))):
        kind = draw(st.sampled_from(("setting", "setting", "nested", "odd")))
        if kind == "odd":
            name = draw(
                st.one_of(
                    st.text(alphabet="ABCXYZ_", max_size=12).map(lambda suffix: "MCP_GATEWAY_" + suffix),
                    st.sampled_from(("MCP_GATEWAY_CONFIG_X", "MCP_GATEWAY___", "MCP_GATEWAY_LIMITS__", "OTHER")),
                )
            )
            environ[name] = draw(env_values)
            continue
        path = draw(st.sampled_from(SETTINGS))
        environ[variable(path)] = draw(env_values)
        if kind == "nested" and len(path) > 1:
            above = path[: draw(st.integers(min_value=1, max_value=len(path) - 1))]
            environ[variable(above)] = draw(env_values)
    return environ


def file_settings(path: str, other: str, env: str) -> list[dict[str, Any]]:
    """Every setting that names a file or a variable, each in an otherwise valid document."""
    return [
        {"auth": {"tokens": [{"name": "t", "file": path}]}},
        {"auth": {"tokens": [{"name": "t", "env": env}]}},
        {"auth": {"token_files": [path]}},
        {"auth": {"hmac": {"keys": [{"key_id": "k", "file": path}]}}},
        {"auth": {"oauth": {"issuer": "https://auth.plant.lan", "jwks_file": path}}},
        {"providers": {"auth": {"mode": "shared", "shared_secret": {"file": path}}}},
        {"providers": {"auth": {"mode": "identities", "identities": [{"name": "i", "env": env, "slots": ["*"]}]}}},
        {"tls": {"cert_file": path, "key_file": other}},
        {"upstreams": {"remote": [{"name": "r", "url": "https://tools.plant.lan/mcp", "headers_file": path}]}},
        {"upstreams": {"remote": [{"name": "r", "url": "https://tools.plant.lan/mcp", "ca_file": path}]}},
        {"upstreams": {"stdio": [{"name": "s", "command": ["true"], "cwd": path}]}},
    ]


file_documents = st.tuples(paths, paths, env_names, st.integers(min_value=0, max_value=10)).map(
    lambda case: file_settings(case[0], case[1], case[2])[case[3]]
)
config_files = st.one_of(
    documents().map(toml_document),
    file_documents.map(toml_document),
    fz.mutated(documents().map(toml_document)),
    st.binary(max_size=120),
    st.none(),  # no file: defaults and environment only
)


@pytest.fixture(scope="module", autouse=True)
def secret_variables() -> Iterator[None]:
    os.environ[SECRET_ENV] = "a-long-enough-secret-0123456789"
    os.environ[SHORT_ENV] = "short"
    yield
    del os.environ[SECRET_ENV], os.environ[SHORT_ENV]


@fuzz_settings(300)
@given(text=config_files, environ=environments())
def test_configuration_loads_or_fails_with_a_config_error(text: bytes | None, environ: dict[str, str]) -> None:
    tally("config.load_config")
    path: Path | None = None
    if text is not None:
        path = FOLDER / "gateway.toml"
        path.write_bytes(text)
    try:
        config = load_config(path, environ=environ)
    except ConfigError as exc:
        assert str(exc)
        return
    assert isinstance(config, GatewayConfig)
    orjson.dumps(masked_dump(config))  # `config show` prints it
    try:
        # What `config check` and `run` build from it before anything listens.
        check_client_auth(config)
        if config.tls.enabled:
            ServerTls(config.tls, Metrics())
    except ConfigError as exc:
        assert str(exc)
