"""[[upstreams.remote]] files checked as the gateway will use them: a ca_file is loaded as the link loads it
(refused with the [[mqtt.brokers]] ca_file's words when it holds no PEM CA certificate, named as a directory
when it is one), and a headers_file that gives one header twice is refused with its line and name."""

from __future__ import annotations

from pathlib import Path

import pytest
from cryptography.hazmat.primitives.serialization import Encoding

from gateway.config import ConfigError, load_config
from gateway.policy.tls_self_signed import new_authority
from tests.support.written_config import config_check

ENTRY = '[[upstreams.remote]]\nname = "files"\nurl = "https://127.0.0.1:57780/mcp"\n'


def load(tmp_path: Path, body: str) -> None:
    path = tmp_path / "gateway.toml"
    path.write_text(ENTRY + body + "\n")
    load_config(path, environ={})


def refusal(tmp_path: Path, body: str) -> str:
    with pytest.raises(ConfigError) as caught:
        load(tmp_path, body)
    return str(caught.value)


# -- ca_file -------------------------------------------------------------------------------------


def test_a_ca_file_that_is_not_pem_is_refused_with_the_mqtt_ca_files_words(tmp_path: Path) -> None:
    ca = tmp_path / "token.txt"
    ca.write_text("not a certificate\n")
    message = refusal(tmp_path, f'ca_file = "{ca}"')
    assert f"upstream 'files': ca_file {ca}: no usable PEM CA certificate" in message
    assert "(_ssl.c:" not in message  # OpenSSL's source location is no part of the words


def test_a_ca_file_that_is_a_directory_is_named_as_one(tmp_path: Path) -> None:
    message = refusal(tmp_path, f'ca_file = "{tmp_path}"')
    assert f"ca_file {tmp_path}: is a directory" in message
    assert "not found" not in message


def test_a_missing_ca_file_is_not_found(tmp_path: Path) -> None:
    assert f"ca_file {tmp_path / 'none.pem'}: not found" in refusal(tmp_path, f'ca_file = "{tmp_path / "none.pem"}"')


def test_a_pem_ca_file_is_accepted(tmp_path: Path) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_bytes(new_authority("upstream test").certificate.public_bytes(Encoding.PEM))
    load(tmp_path, f'ca_file = "{ca}"')


def test_config_check_refuses_a_ca_file_that_is_not_pem(tmp_path: Path) -> None:
    ca = tmp_path / "token.txt"
    ca.write_text("gw-secret-looking-text\n")
    checked = config_check(tmp_path, ENTRY + f'ca_file = "{ca}"\n')
    assert checked.returncode != 0
    assert f"ca_file {ca}: no usable PEM CA certificate" in checked.stderr
    assert "Traceback" not in checked.stderr


# -- headers_file --------------------------------------------------------------------------------


@pytest.mark.parametrize("second", ["X-Api-Key", "x-api-key", "X-API-KEY"])
def test_a_header_given_twice_in_headers_file_is_refused(tmp_path: Path, second: str) -> None:
    headers = tmp_path / "headers.txt"
    headers.write_text(f"X-Api-Key: first-key\nX-Tenant: hall-2\n\n{second}: second-key\n")
    headers.chmod(0o600)
    message = refusal(tmp_path, f'headers_file = "{headers}"')
    assert f"headers_file {headers} line 4: header {second!r} is already given on line 1" in message
    assert "first-key" not in message and "second-key" not in message


def test_distinct_headers_in_headers_file_are_all_sent(tmp_path: Path) -> None:
    headers = tmp_path / "headers.txt"
    headers.write_text("X-Api-Key: k\n# X-Api-Key: commented out\nX-Tenant: hall-2\n")
    headers.chmod(0o600)
    path = tmp_path / "gateway.toml"
    path.write_text(ENTRY + f'headers_file = "{headers}"\n')
    remote = load_config(path, environ={}).upstreams.remote[0]
    assert {name: value.get_secret_value() for name, value in remote.static_headers.items()} == {
        "X-Api-Key": "k",
        "X-Tenant": "hall-2",
    }
