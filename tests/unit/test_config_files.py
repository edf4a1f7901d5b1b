"""Files a setting names are read by one reader (gateway/config/files.py): a regular file only, at most a bound
of bytes. A FIFO nobody writes, a device such as /dev/zero, or an oversized file is refused at once by name;
before, a FIFO hung `config check`, `run` and a reload for good, and /dev/zero ran out of memory."""

from __future__ import annotations

import os
import resource
from pathlib import Path

import pytest

from gateway.config import ConfigError, load_config
from gateway.config.auth import OAuthConfig
from gateway.config.files import MAX_POLICY_FILE_BYTES, MAX_SECRET_FILE_BYTES, FileRefused, read_regular_file
from gateway.config.telemetry import TelemetryConfigError, read_headers_file
from gateway.policy.rules.checking import PolicyError, read_policy_file
from gateway.policy.token_files import TokenFileError, read_token_file
from tests.support.written_config import REMOTE, config_check, write_config

pytestmark = pytest.mark.timeout(20)  # a FIFO that is opened for reading blocks: fail, do not stall the run
CHECK_TIMEOUT_S = 15  # under the 20 s above: a `config check` that hangs fails by its own timeout first


@pytest.fixture
def fifo(tmp_path: Path) -> Path:
    """A FIFO (mode 0600, as its owner would make one) that nobody ever writes."""
    path = tmp_path / "fifo"
    os.mkfifo(path, 0o600)
    return path


def test_the_reader_refuses_a_fifo_at_once(fifo: Path) -> None:
    with pytest.raises(FileRefused) as refused:
        read_regular_file(fifo, "secret", 1024)
    assert str(refused.value) == f"secret: file {fifo} is not a regular file"
    assert refused.value.reason == "not a regular file"


def test_the_reader_refuses_a_device_and_a_directory(tmp_path: Path) -> None:
    with pytest.raises(FileRefused, match=r"^secret: file /dev/zero is not a regular file$"):
        read_regular_file("/dev/zero", "secret", 1024)
    with pytest.raises(IsADirectoryError):  # as reading one fails: each caller words it as it always has
        read_regular_file(tmp_path, "secret", 1024)


def test_the_reader_reads_up_to_its_bound_and_refuses_more(tmp_path: Path) -> None:
    path = tmp_path / "data"
    path.write_bytes(b"x" * 100_000)
    assert read_regular_file(path, "data", 100_000) == b"x" * 100_000
    with pytest.raises(FileRefused) as refused:
        read_regular_file(path, "data", 99_999)
    assert str(refused.value) == f"data: file {path} is larger than 99999 bytes, the bound for it"


def test_the_reader_lets_its_caller_refuse_by_mode_before_reading(tmp_path: Path) -> None:
    path = tmp_path / "secret"
    path.write_text("s3cret\n")
    path.chmod(0o622)

    def private(info: os.stat_result) -> None:
        if info.st_mode & 0o022:
            raise ValueError("writable by others")

    with pytest.raises(ValueError, match="writable by others"):
        read_regular_file(path, "secret", 1024, check=private)
    path.chmod(0o600)
    assert read_regular_file(path, "secret", 1024, check=private) == b"s3cret\n"


def test_the_reader_raises_the_os_error_of_a_missing_file(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        read_regular_file(tmp_path / "missing", "secret", 1024)


def refusal(tmp_path: Path, text: str) -> str:
    path = write_config(tmp_path, text)
    with pytest.raises(ConfigError) as refused:
        load_config(path, environ={})
    return str(refused.value).removeprefix(f"config file {path}: ")


@pytest.mark.parametrize(
    ("section", "expected"),
    [
        ('[tls]\ncert_file = "{f}"\nkey_file = "{f}"\n', "setting 'tls': cert_file {f}: not a regular file"),
        (
            '[providers.auth]\nmode = "shared"\nshared_secret = {{ file = "{f}" }}\n',
            "setting 'providers.auth.shared_secret': shared_secret: file {f} is not a regular file",
        ),
        (REMOTE + 'secret = {{ file = "{f}" }}\n', "setting 'upstreams.remote.0.secret': secret: file {f} is not"),
        (REMOTE + 'headers_file = "{f}"\n', "setting 'upstreams.remote.0': upstream 'r1': headers_file {f} is not"),
        (
            '[auth.oauth]\nissuer = "https://issuer.example"\njwks_file = "{f}"\n',
            "setting 'auth.oauth': jwks_file {f}: not a regular file",
        ),
        ('[policy]\nfile = "{f}"\n', "setting 'policy.file': policy file {f}: not a regular file"),
        (
            '[[auth.hmac.keys]]\nkey_id = "k1"\nfile = "{f}"\n',
            "auth.hmac.keys 'k1': file {f} is not a regular file",
        ),
        ('[[auth.tokens]]\nname = "alice"\nfile = "{f}"\n', "auth.tokens 'alice': file {f} is not a regular file"),
    ],
)
def test_every_setting_naming_a_fifo_is_refused_by_the_loader(
    tmp_path: Path, fifo: Path, section: str, expected: str
) -> None:
    message = refusal(tmp_path, "port = 0\n" + section.format(f=fifo))
    assert expected.format(f=fifo) in message


def test_the_files_run_reads_refuse_a_fifo_too(fifo: Path) -> None:
    with pytest.raises(TokenFileError, match=f"^token file {fifo}: not a regular file$"):
        read_token_file(fifo)
    with pytest.raises(TelemetryConfigError, match=f"^\\[telemetry\\] headers_file {fifo}: not a regular file$"):
        read_headers_file(str(fifo))
    with pytest.raises(PolicyError, match=f"^policy file {fifo}: not a regular file$"):
        read_policy_file(fifo)


def limited_memory() -> None:
    # A reader without a bound would fill the machine's memory from /dev/zero: cap this process at 1 GiB.
    resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))


@pytest.mark.parametrize(
    ("entry", "expected"),
    [
        ('secret = { file = "/dev/zero" }\n', "secret: file /dev/zero is not a regular file"),
        ('headers_file = "/dev/zero"\n', "headers_file /dev/zero is not a regular file"),
    ],
)
def test_dev_zero_as_a_remote_secret_or_headers_file_is_refused_not_read(
    tmp_path: Path, entry: str, expected: str
) -> None:
    done = config_check(tmp_path, "port = 0\n" + REMOTE + entry, preexec_fn=limited_memory, timeout_s=CHECK_TIMEOUT_S)
    assert done.returncode == 2, done.stderr
    assert expected in done.stderr
    assert "Traceback" not in done.stderr


def test_an_oversized_secret_headers_token_or_policy_file_is_refused_naming_its_bound(tmp_path: Path) -> None:
    big = tmp_path / "big"
    big.write_bytes(b"a" * (MAX_SECRET_FILE_BYTES + 1))
    big.chmod(0o600)
    message = refusal(tmp_path, "port = 0\n" + REMOTE + f'secret = {{ file = "{big}" }}\n')
    assert f"secret: file {big} is larger than {MAX_SECRET_FILE_BYTES} bytes, the bound for it" in message
    message = refusal(tmp_path, "port = 0\n" + REMOTE + f'headers_file = "{big}"\n')
    assert f"headers_file {big} is larger than {MAX_SECRET_FILE_BYTES} bytes" in message
    with pytest.raises(TokenFileError, match=f"larger than {MAX_SECRET_FILE_BYTES} bytes"):
        read_token_file(big)
    policy = tmp_path / "policy.toml"
    policy.write_bytes(b"#" * (MAX_POLICY_FILE_BYTES + 1))
    with pytest.raises(PolicyError, match=f"larger than {MAX_POLICY_FILE_BYTES} bytes"):
        read_policy_file(policy)


def test_a_file_within_its_bound_still_loads(tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_text("a-remote-credential\n")
    secret.chmod(0o600)
    headers = tmp_path / "headers"
    headers.write_text("# comment\nX-Api-Key: abc\n")
    headers.chmod(0o600)
    config = write_config(
        tmp_path,
        f'port = 0\n{REMOTE}secret = {{ file = "{secret}" }}\n'
        f'[[upstreams.remote]]\nname = "r2"\nurl = "https://example.com/mcp"\nheaders_file = "{headers}"\n',
    )
    loaded = load_config(config, environ={})
    assert loaded.upstreams.remote[0].secret is not None
    assert loaded.upstreams.remote[0].secret.secret.get_secret_value() == "a-remote-credential"
    assert loaded.upstreams.remote[1].static_headers["X-Api-Key"].get_secret_value() == "abc"


@pytest.mark.parametrize(
    ("section", "expected"),
    [
        ('[tls]\ncert_file = "{f}"\nkey_file = "{f}"\n', "cert_file {f}: not a regular file"),
        ('[auth]\ntoken_files = ["{f}"]\n', "token file {f}: not a regular file"),
        ('[telemetry]\nendpoint = "http://127.0.0.1:9"\nheaders_file = "{f}"\n', "headers_file {f}: not a regular"),
    ],
)
def test_config_check_refuses_a_fifo_instead_of_hanging(
    tmp_path: Path, fifo: Path, section: str, expected: str
) -> None:
    fifo.chmod(0o644)  # readable by others, as a FIFO made without a umask of 077 is
    done = config_check(tmp_path, "port = 0\n" + section.format(f=fifo), timeout_s=CHECK_TIMEOUT_S)
    assert done.returncode == 2, done.stderr
    assert expected.format(f=fifo) in done.stderr
    assert "chmod" not in done.stdout + done.stderr  # the mode of what is no file is not the problem


def test_a_jwks_file_may_be_a_device_but_is_read_within_its_bound(tmp_path: Path) -> None:
    # /dev/null stands for a key set still to come (run refuses the empty set); /dev/zero is never read whole.
    assert OAuthConfig.model_validate({"issuer": "https://i.example", "jwks_file": "/dev/null"}).jwks_file
    message = refusal(tmp_path, 'port = 0\n[auth.oauth]\nissuer = "https://i.example"\njwks_file = "/dev/zero"\n')
    assert f"jwks_file /dev/zero: larger than {MAX_SECRET_FILE_BYTES} bytes" in message
