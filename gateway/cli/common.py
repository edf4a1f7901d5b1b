"""What several subcommands share: configuration flags, the LAN-bind check, flag types and credential files."""

from __future__ import annotations

import argparse
import math
import os
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeAlias
from urllib.parse import urlsplit

from gateway.config import DEFAULT_PORT, GatewayConfig, bind_shown, lan_sides_text, load_config
from gateway.config.base import ENV_CLIENT_URL, masked_url, masked_url_and_query

if TYPE_CHECKING:
    import ssl

Commands: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"
"""What `add_subparsers()` returns: each subcommand module adds its parsers to it."""

DEFAULT_URL = f"http://127.0.0.1:{DEFAULT_PORT}"
"""The gateway a client subcommand talks to unless --url, $MCP_GATEWAY_URL (or sim's --gateway) says otherwise."""


class EnvDefault(str):
    """A flag's default read from an environment variable: a str (so argparse checks it with the flag's
    type, as if given on the command line) that remembers the variable, for the error message."""

    variable: str


def env_default(variable: str, fallback: str) -> str:
    """$variable when set (and not blank), else `fallback`; read when the parser is built, i.e. per command."""
    text = os.environ.get(variable, "").strip()
    if not text:
        return fallback
    value = EnvDefault(text)
    value.variable = variable
    return value


def check_base_url(
    text: str,
    what: str,
    example: str,
    schemes: tuple[str, ...] = ("http", "https"),
    *,
    token_flag: str | None,
    require_port: bool = False,
) -> str:
    """`text` when it is a base URL of one of `schemes`: scheme, host, a valid port (given, with
    `require_port`; else the scheme's when left out), no user or password, no path beyond "/"; else
    ValueError. `token_flag`: the calling command's flag for a credential, which a refused user@ names
    (None: the endpoint takes none).

    Checked here, before aiohttp sees it: aiohttp's own errors for these (NonHttpUrlClientError,
    InvalidUrlClientError) are tracebacks, a URL with a path is joined into a wrong endpoint (404), and
    a user and password would go out as Basic credentials, which the gateway refuses."""
    parts = urlsplit(text)
    shown = shown_url(text)  # quoted back: a query value or userinfo may be a secret
    if parts.scheme not in schemes:
        allowed = " or ".join(", ".join(f"{scheme}://" for scheme in schemes).rsplit(", ", 1))
        raise ValueError(f"must start with {allowed}, e.g. {example}; got {shown!r}")
    if parts.username is not None or parts.password is not None:
        # Not echoed: the part before the @ may be a secret.
        credential = f", and a token with {token_flag}" if token_flag else ", without credentials"
        raise ValueError(f"carries a user or password (user@ before the host); give {what} as {example}{credential}")
    try:
        port = parts.port  # ValueError: out of 0-65535, or not a number
    except ValueError:
        port = 0
    if not parts.hostname:
        raise ValueError(f"has no host, e.g. {example}; got {shown!r}")
    if port == 0 or (port is None and (require_port or parts.netloc.endswith(":"))):
        raise ValueError(f"has no valid port (1-65535), e.g. {example}; got {shown!r}")
    extra = [
        name
        for name, present in (
            ("path", parts.path not in ("", "/")),
            ("query (?...)", bool(parts.query)),
            ("anchor (#...)", bool(parts.fragment)),
        )
        if present
    ]
    if extra:
        raise ValueError(f"is {what}, e.g. {example}, with no {' or '.join(extra)}; got {shown!r}")
    return text


_SCHEME_LEAD = re.compile(r"(?:(?:[A-Za-z][A-Za-z0-9+.-]*:?)?/+)?")
"""What a URL may start with ahead of a user and password: `https://`, or without `://`, `https//`, `http:/`."""


_HOST_PORT = re.compile(r"(?:\[[^\]/?#@]*\]|[^:\[\]/?#@]*):(?P<port>[0-9]{1,5})")
"""An authority that is a host with a port (`127.0.0.1:3000`, `[::1]:3000`): no userinfo in it."""


def shown_url(text: str) -> str:
    """`text` as a refusal quotes it, with the password of its userinfo, every query value and the
    fragment masked whatever the parse.

    Where the userinfo ends: an authority (the text after the scheme up to the first `/`, `?` or `#`)
    that is a host with a port (0-65535) has none. An `@` after it may be in the path, query or
    fragment (`http://h:1/x@y` names host h), or end a password that starts with digits
    (`http://admin:1234/x@y`): the two cannot be told apart, so such a text shows its host and masks
    the rest from the port on (`http://h:***`, `http://admin:***`), never naming a host after the `@`
    nor a password's start. Any other text before an `@` is taken for a userinfo ending at the LAST `@` of the text:
    a password may hold `/ ? # @` (`admin:s3cr/et@gw`, whose `s3cr` is no port), and urlsplit (which
    ends the userinfo at the first of them) would leave its start in view; so may a lone user name
    (`http://tok/en@gw`). A userinfo without a password, or whose user holds one of them, is masked
    whole (a lone user name is often a token)."""
    lead = _SCHEME_LEAD.match(text)
    start = lead.end() if lead else 0
    authority = re.split(r"[/?#]", text[start:], maxsplit=1)[0]
    host_port = _HOST_PORT.fullmatch(authority)
    if host_port and int(host_port["port"]) <= 65535:
        if "@" in text[start + len(authority) :]:
            # `admin:1234/x@gw` reads as host admin, port 1234, yet may be a password: show neither.
            return f"{text[:start]}{authority.rpartition(':')[0]}:***"
        userinfo, at, rest = "", "", text[start:]
    else:
        userinfo, at, rest = text[start:].rpartition("@")
    if not at:
        rest = text[start:]
    user, colon, _ = userinfo.partition(":")
    shown_user = f"{user}:***" if colon and not any(mark in user for mark in "/?#") else "***"
    end = min((index for index in map(rest.find, "?#") if index >= 0), default=len(rest))
    query, hashmark, fragment = rest[end:].partition("#")
    # The query's values masked as those of any URL.
    query = masked_url_and_query(f"x://h{query}").removeprefix("x://h") if query else ""
    head = f"{text[:start]}{shown_user}@" if at else text[:start]
    return f"{head}{rest[:end]}{query}{hashmark}{'***' if fragment else ''}"


def _url_flag(what: str, example: str, token_flag: str | None) -> Callable[[str], str]:
    """An argparse type checking a base URL; the message names the environment variable it came from."""

    def check(text: str) -> str:
        try:
            # A plain str, whatever its source.
            return str(check_base_url(text, what, example, token_flag=token_flag))
        except ValueError as exc:
            variable = getattr(text, "variable", None)
            source = f"(from ${variable}) " if variable else ""
            raise argparse.ArgumentTypeError(f"{source}{exc}") from None

    return check


def gateway_url_option(sub: argparse.ArgumentParser, purpose: str = "the gateway's base URL") -> None:
    """--url for a client command: the gateway's base URL, default $MCP_GATEWAY_URL, else DEFAULT_URL.

    One definition for every client command, so each checks it the same way before connecting; each
    of them takes its client token with --token-file."""
    sub.add_argument(
        "--url",
        type=_url_flag("the gateway's base URL", "http://HOST:PORT", "--token-file"),
        default=env_default(ENV_CLIENT_URL, DEFAULT_URL),
        metavar="URL",
        help=f"{purpose}, http(s)://HOST:PORT (default: ${ENV_CLIENT_URL}, else {DEFAULT_URL})",
    )


def gateway_timeout_option(sub: argparse.ArgumentParser) -> None:
    """--timeout for a client command: the longest silence of the gateway it waits through (connecting,
    then between two reads of an answer); 0 waits without limit. Not a limit on a whole call: a gateway
    carrying out a long call streams keepalives (docs/configuration.md, "Client commands")."""
    from gateway.client import DEFAULT_TIMEOUT_S

    sub.add_argument(
        "--timeout",
        type=decimal_number(0),
        default=DEFAULT_TIMEOUT_S,
        metavar="SECONDS",
        help=f"how long to wait for the gateway to connect and then to send anything (default {DEFAULT_TIMEOUT_S:g}; "
        "0: no limit); a long call is waited for while the gateway sends its keepalives",
    )


MIN_ANSWER_BYTES = 64 * 1024
"""The least --max-answer-bytes allows: an initialize answer alone takes several hundred bytes and a
pump's tools/list several KiB, so a smaller bound refuses every answer as too large."""


def gateway_answer_option(sub: argparse.ArgumentParser) -> None:
    """--max-answer-bytes for a command that reads an answer: its bound, for a gateway whose
    limits.max_frame_bytes lets a provider answer more than the default."""
    from gateway.client_answers import MAX_ANSWER_BYTES, MAX_ANSWER_BYTES_LIMIT

    sub.add_argument(
        "--max-answer-bytes",
        type=whole_number(
            MIN_ANSWER_BYTES,
            MAX_ANSWER_BYTES_LIMIT,
            " (64 KiB to 1 GiB: an initialize answer alone takes several hundred bytes, a tools/list several KiB)",
        ),
        default=MAX_ANSWER_BYTES,
        metavar="N",
        help=f"the largest answer read, in bytes (default {MAX_ANSWER_BYTES}, 16 MiB; at least {MIN_ANSWER_BYTES}, "
        f"64 KiB; at most {MAX_ANSWER_BYTES_LIMIT}, 1 GiB, the gateway's largest limits.max_frame_bytes)",
    )


def control_url_option(sub: argparse.ArgumentParser, variable: str, fallback: str) -> None:
    """--control for sim-status and sim-fault: the simulator's control endpoint, checked as --url is."""
    sub.add_argument(
        "--control",
        type=_url_flag("the simulator's control endpoint", fallback, None),
        default=env_default(variable, fallback),
        metavar="URL",
        help=f"the simulator's control endpoint (default: ${variable}, else {fallback})",
    )


def with_config(sub: argparse.ArgumentParser) -> None:
    sub.add_argument("--config", help="TOML config file (default: $MCP_GATEWAY_CONFIG, else built-in defaults)")


def _config_flags(args: argparse.Namespace) -> dict[str, Any]:
    flags: dict[str, Any] = {}
    if getattr(args, "host", None) is not None:
        flags["host"] = args.host
    if getattr(args, "port", None) is not None:
        flags["port"] = args.port
    if getattr(args, "insecure_lan", False):
        flags["insecure_lan"] = True
    if getattr(args, "log_level", None) is not None:
        flags["logging.level"] = args.log_level
    if getattr(args, "stdio", None):
        flags["upstreams.stdio"] = list(args.stdio)  # added to the [[upstreams.stdio]] of the file
    if getattr(args, "remote", None):
        flags["upstreams.remote"] = list(args.remote)  # added to the [[upstreams.remote]] of the file
    if getattr(args, "mqtt", None):
        flags["mqtt.brokers"] = [{"url": url} for url in args.mqtt]  # added to the [[mqtt.brokers]] of the file
    if getattr(args, "mdns", None) is not None:
        flags["mdns.enabled"] = args.mdns
    if getattr(args, "serial", None):
        flags["serial.ports"] = list(args.serial)  # added to the [[serial.ports]] of the file
    return flags


def serial_port_flag(text: str) -> dict[str, Any]:
    """--serial PATH[@BAUD]: a serial port to serve, at BAUD (default 115200; the rest in the config file).

    Whatever follows the last @ is the baud rate, so a typo in it (9216OO) is refused, not taken into
    the path of a port that does not exist; a path with an @ in its name goes in the file's [[serial.ports]]."""
    path, sep, baud = text.rpartition("@")
    if not sep:
        path, baud = text, ""
    elif not (baud.isascii() and baud.isdigit()):
        raise argparse.ArgumentTypeError(
            f"expected PATH[@BAUD] with BAUD a whole number, e.g. /dev/ttyUSB0@921600, got {text!r} "
            "(a path with @ in its name goes in the config file: [[serial.ports]] path)"
        )
    if not path.strip():
        raise argparse.ArgumentTypeError(f"expected PATH[@BAUD], e.g. /dev/ttyUSB0@921600, got {text!r}")
    # The bounds of [[serial.ports]] baud, checked before int() meets a number of any length.
    if baud and (len(baud) > 8 or not SERIAL_BAUD_MIN <= int(baud) <= SERIAL_BAUD_MAX):
        raise argparse.ArgumentTypeError(
            f"BAUD must be from {SERIAL_BAUD_MIN} to {SERIAL_BAUD_MAX}, e.g. /dev/ttyUSB0@921600, got {text!r}"
        )
    return {"path": path.strip(), **({"baud": int(baud)} if baud else {})}


SERIAL_BAUD_MIN = 50
SERIAL_BAUD_MAX = 12_000_000
"""--serial PATH@BAUD's bounds: those of [[serial.ports]] baud (gateway/config/serial.py)."""


def whole_number(minimum: int, maximum: int | None = None, meaning: str = "") -> Callable[[str], int]:
    """An argparse type: a whole number from `minimum` (up to `maximum`); argparse's refusal names the
    flag, this message the range (and `meaning`, e.g. what 0 means) and what was given."""
    allowed = f"from {minimum} to {maximum}" if maximum is not None else f"of {minimum} or more"

    def check(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = None
        if value is None or value < minimum or (maximum is not None and value > maximum):
            raise argparse.ArgumentTypeError(f"expected a whole number {allowed}{meaning}, got {text!r}")
        return value

    return check


def decimal_number(minimum: float, maximum: float | None = None, *, above: bool = False) -> Callable[[str], float]:
    """An argparse type: a finite number from `minimum` (above it, with `above`) up to `maximum`."""
    if maximum is not None:
        allowed = f"{'above' if above else 'from'} {minimum:g} to {maximum:g}"
    else:
        allowed = f"above {minimum:g}" if above else f"of {minimum:g} or more"

    def check(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        low_ok = value > minimum if above else value >= minimum
        if not math.isfinite(value) or not low_ok or (maximum is not None and value > maximum):
            raise argparse.ArgumentTypeError(f"expected a number {allowed}, got {text!r}")
        return value

    return check


PORT_NUMBER = whole_number(0, 65535, " (0: any free port)")
"""The argparse type of a port to listen on, where 0 lets the system pick a free one."""


def directory_name(text: str) -> str:
    """An argparse type: a directory's name, never empty: an unset shell variable ("$DEST") would
    otherwise name the current directory, and a backup or certificates would land wherever the command
    runs."""
    if not text:
        raise argparse.ArgumentTypeError("expected a directory's name, got an empty one")
    return text


def trusted_ca(path: str, flag: str = "--ca-file") -> ssl.SSLContext:
    """A client TLS context trusting the CA certificate(s) in the PEM file `path`; ValueError naming
    `flag` and the file when it cannot be read or holds no certificate (ssl's own errors name neither)."""
    import ssl

    try:
        return ssl.create_default_context(cafile=path)
    except ssl.SSLError as exc:  # an OSError too: first
        raise ValueError(
            f"{flag} {path} holds no CA certificate in PEM form ({exc.reason or exc}): give the CA's PEM file, "
            "e.g. the ca.pem of `mcp-gateway tls self-signed`"
        ) from None
    except OSError as exc:
        raise ValueError(f"{flag} {path} cannot be read: {exc.strerror or exc}") from None


def mqtt_url_flag(text: str) -> str:
    """--mqtt URL: mqtt://HOST[:PORT] or mqtts://HOST[:PORT]."""
    if not text.startswith(("mqtt://", "mqtts://")):
        raise argparse.ArgumentTypeError(f"expected mqtt://HOST[:PORT] or mqtts://HOST[:PORT], got {text!r}")
    try:
        port = urlsplit(text).port
    except ValueError:
        port = None  # out of range: the broker's own check names it
    if port == 0:  # the client would dial 1883 (8883), not the port written
        raise argparse.ArgumentTypeError(
            f"port 0 is no broker's port: give 1 to 65535, or none for 1883 (8883 with mqtts), got {masked_url(text)!r}"
        )
    return text


def _load(args: argparse.Namespace) -> GatewayConfig:
    return load_config(getattr(args, "config", None), flags=_config_flags(args))


def refuse_insecure_bind(config: GatewayConfig) -> str | None:
    """The reason `run` must not start, or None. A LAN bind needs client AND provider authentication."""
    missing = config.lan_open_sides  # empty on loopback
    if not missing or config.insecure_lan:
        return None
    what, risk = lan_sides_text(missing)
    return (
        f"refusing to listen on {bind_shown(config.host)} without {what}: anyone on the network could {risk}. "
        "A LAN bind needs both: client authentication ([auth] tokens, token_files or oauth, or [auth.hmac] keys) "
        'and provider authentication ([providers.auth] mode = "shared" or "identities"). Configure what is '
        "missing, bind to 127.0.0.1, or pass --insecure-lan to accept the risk."
    )


CREDENTIAL_PIPE_TIMEOUT_S = 10.0
"""The longest wait for a pipe or FIFO given as a credential file (`--token-file <(pass show x)`,
/dev/stdin) to be written and closed: a FIFO nobody opens ends the command instead of hanging it."""


NOT_REGULAR = "not a regular file"
"""FileRefused's reason for a device, a socket or a FIFO (gateway/config/files.py)."""


def _read_credential_file(path: str, what: str) -> str:
    """The credential a file holds, as the gateway reads its own secret files (secret_from_text: a
    byte-order mark skipped, white space around it stripped, more than one non-empty line refused:
    a line break would end up in an HTTP header); ValueError naming `what` and the file. A regular
    file or a pipe (a FIFO, /dev/stdin, process substitution), of at most MAX_SECRET_FILE_BYTES; a
    device such as /dev/zero is refused (it would fill the command's memory)."""
    from gateway.config.auth import secret_from_text

    return secret_from_text(_credential_text(path, what), f"{what} {path}")


def read_passphrase_file(path: str, what: str) -> str:
    """A passphrase file (a Wi-Fi password), read as _read_credential_file reads a file, but taken as it
    is: blanks are part of a WPA passphrase, so only a leading byte-order mark and one final line end
    (\\n or \\r\\n, as an editor or `echo` leaves it) go. ValueError naming `what` and the file when it is
    empty or holds a line break."""
    text = _credential_text(path, what).removeprefix("\ufeff")
    text = text.removesuffix("\r\n") if text.endswith("\r\n") else text.removesuffix("\n")
    if not text:
        raise ValueError(f"{what} {path} is empty")
    if "\n" in text or "\r" in text:
        raise ValueError(f"{what} {path} holds a line break; put the passphrase alone on one line")
    return text


def _credential_text(path: str, what: str) -> str:
    """The text of a credential file or pipe (see _read_credential_file); ValueError naming `what` and the file."""
    from gateway.config.files import MAX_SECRET_FILE_BYTES, FileRefused, read_regular_file

    try:
        raw = _read_pipe(path, what, MAX_SECRET_FILE_BYTES)
        if raw is None:
            raw = read_regular_file(path, what, MAX_SECRET_FILE_BYTES)
        text = raw.decode("utf-8")
    except FileRefused as exc:
        raise ValueError(
            f"{what} {path}: cannot be used: it is {exc.reason}{' or a pipe' if exc.reason == NOT_REGULAR else ''}; "
            "give a file or a pipe holding the credential"
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"{what} {path}: cannot be read ({exc})") from None
    return text


def _read_pipe(path: str, what: str, max_bytes: int) -> bytes | None:
    """What the pipe or FIFO at `path` carries up to its end, of at most `max_bytes` (FileRefused past
    them); None when `path` is no pipe. Opened and read without blocking, each wait bounded by
    CREDENTIAL_PIPE_TIMEOUT_S in all, so a FIFO without a writer, or a writer that never ends, cannot
    hang the command (ValueError naming the bound)."""
    import select
    import stat
    import time

    from gateway.config.files import FileRefused

    descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        if not stat.S_ISFIFO(os.fstat(descriptor).st_mode):
            return None
        deadline = time.monotonic() + CREDENTIAL_PIPE_TIMEOUT_S
        poller = select.poll()
        poller.register(descriptor, select.POLLIN)
        chunks: list[bytes] = []
        size = 0
        hung_up = False
        while True:
            try:
                chunk = os.read(descriptor, 64 << 10)
            except BlockingIOError:  # a writer is there, nothing written yet
                chunk = None
            if chunk:
                size += len(chunk)
                if size > max_bytes:
                    raise FileRefused(what, path, f"larger than {max_bytes} bytes, the bound for it")
                chunks.append(chunk)
                continue
            # An end (b""): the writer closed, once it has written or hung up; before, none has come yet.
            if chunk is not None and (chunks or hung_up):
                return b"".join(chunks)
            left = deadline - time.monotonic()
            events = poller.poll(max(0, int(left * 1000) + 1)) if left > 0 else []
            if not events:
                raise ValueError(
                    f"{what} {path}: no writer/no data within {CREDENTIAL_PIPE_TIMEOUT_S:g} s "
                    "(CREDENTIAL_PIPE_TIMEOUT_S): a pipe or FIFO is read once, from a writer that writes the "
                    "credential and closes it"
                )
            hung_up = any(event & select.POLLHUP for _, event in events)
    finally:
        os.close(descriptor)


def client_token_from_env() -> str | None:
    """$MCP_GATEWAY_TOKEN read as a token file is (None when unset or blank); ValueError naming it."""
    import os

    from gateway.config import ENV_CLIENT_TOKEN
    from gateway.config.auth import secret_from_text

    value = os.environ.get(ENV_CLIENT_TOKEN, "")
    return secret_from_text(value, f"${ENV_CLIENT_TOKEN}") if value.strip() else None
