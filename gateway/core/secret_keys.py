"""Which names hold secrets: the keys of a call's arguments whose values the audit trail and the approvals
list mask, and the arguments of a stdio upstream's command that `config show` masks. One rule for both,
so a name reads the same wherever the gateway shows it."""

from __future__ import annotations

import functools
import itertools
import re
from typing import Any

MAX_KEYS_REMEMBERED = 4096
"""Keys whose verdict is kept (the same few keys come in every call)."""

KEY_WORD = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|\d+")
"""A word of a key: snake_case, kebab-case, camelCase and PascalCase split alike ("userPIN" is user, pin)."""
SECRET_WORDS = frozenset(
    {
        "password",
        "passwords",
        "passwd",
        "passphrase",
        "pwd",
        "pincode",
        "passcode",
        "secret",
        "secrets",
        "token",
        "tokens",
        "credential",
        "credentials",
        "cookie",
        "cookies",
        "bearer",
        "authorization",
        "apikey",
        "privatekey",
        "psk",
        "otp",
        "jwt",
    }
)
"""A key holding one of these words is secret-looking: `db_password`, `passcode`, not `tokenizer`. A bare
`pin` is not one: on this appliance it is mostly a GPIO pin number, which an approver must see to tell
two calls apart; PIN codes are caught by PIN_CODE_WORDS, SECRET_PAIRS and `PIN` in capitals."""
PIN_CODE_WORDS = frozenset(
    {"user", "sim", "admin", "unlock", "door", "master", "card", "alarm", "access", "security", "lock", "login"}
    | {"bank", "safe", "owner", "pass", "secret", "puk"}
)
"""Words that, before `pin`, make it a PIN code rather than a GPIO pin: `unlock_pin`, `alarmPin`, `sim_pin`
(`led_pin`, `gpio_pin` and `relay_pin` are pins)."""
KEY_KINDS = frozenset(
    {"api", "private", "session", "access", "auth", "hmac", "signing", "encryption", "aes", "ssh", "wifi", "wpa"}
)
"""Words that, before `key`, make it a secret key rather than a name or an index (`valve_key`, `key`)."""
PASS_KINDS = frozenset({"wifi", "wpa", "mqtt", "db", "user", "admin", "login", "root", "ftp", "smtp"})
"""Words that, before `pass`, make it a password (`mqtt_pass`) rather than a count (`pass`, `pass_count`)."""
SECRET_PAIRS = frozenset(
    {("pin", "code"), ("pin", "hash")}
    | {(word, "key") for word in KEY_KINDS}
    | {(word, "pass") for word in PASS_KINDS}
    | {(word, "pin") for word in PIN_CODE_WORDS}
)
"""Two words in a row that make a key secret-looking: `api_key`, `X-Api-Key`, `privateKey`, `hmac_key`,
`mqtt_pass`, `pin_code`, `pin_hash`, `userPIN`, `door_pin`; not `gpio_pin`, `pin_number` or `valve_key`."""
CAPITAL_PIN = "PIN"
"""`pin` written in capitals is a PIN code (`PIN`, `PIN_2`): a GPIO pin is written as a word (`pin`, `Pin`)."""


def key_words(key: str) -> list[str]:
    """The words of `key` (KEY_WORD), in lower case."""
    return [word.lower() for word in KEY_WORD.findall(key)]


@functools.lru_cache(maxsize=MAX_KEYS_REMEMBERED)
def is_secret_key(key: str) -> bool:
    """Whether the value under `key` is never stored: a word of it is in SECRET_WORDS, or two words in a
    row are a pair of SECRET_PAIRS, in any case, or a word is CAPITAL_PIN as written."""
    words = key_words(key)
    return (
        any(word in SECRET_WORDS for word in words)
        or any(pair in SECRET_PAIRS for pair in itertools.pairwise(words))
        or CAPITAL_PIN in KEY_WORD.findall(key)
    )


ARGUMENT_WORDS = frozenset({"key", "auth", "pass", "secretkey", "accesskey", "signingkey"})
"""Words that mark a command-line argument's value a secret on their own (`--key`, `--auth`, `--pass`),
though a tool's argument under such a key is mostly not one (`{"key": "valve-3"}`)."""
SECRET_ENDINGS = tuple(sorted(SECRET_WORDS))
"""An argument's word ending in a secret word is one too: a flag's name is often run together
(`--dbpassword`, `--accesstoken`)."""


def singular(word: str) -> str:
    """`word` without a plural s (`keys`, `tokens`), `pass` and `access` kept."""
    return word[:-1] if word.endswith("s") and not word.endswith("ss") else word


def is_secret_argument(name: str) -> bool:
    """Whether a command-line argument named `name` (without its leading dashes) carries a secret: its
    name is a secret key (is_secret_key), or, its words taken without a plural s, one is in
    ARGUMENT_WORDS or ends in a secret word, or two in a row are a pair of SECRET_PAIRS. `--api-key`,
    `--keys`, `--signing-keys`, `--dbpassword` do; `--keyboard`, `--author`, `--tokenizer` do not."""
    if is_secret_key(name):
        return True
    words = [singular(word) for word in key_words(name)]
    return any(word in ARGUMENT_WORDS or word.endswith(SECRET_ENDINGS) for word in words) or any(
        pair in SECRET_PAIRS for pair in itertools.pairwise(words)
    )


MASK = "***"
"""What a secret-looking key's value is shown as."""
MAX_DEPTH = 64
"""Deeper than this, a value is shown as TOO_DEEP: the gateway bounds nesting long before, this guards the walk."""
TOO_DEEP = "<nested too deep>"


def mask_secrets(value: Any, depth: int = 0) -> Any:
    """`value` with the value of every secret-looking key replaced by MASK, at any depth: what the audit
    trail stores and what telemetry's captured arguments show."""
    if depth >= MAX_DEPTH:
        return TOO_DEEP
    if isinstance(value, dict):
        return {
            key: MASK if isinstance(key, str) and is_secret_key(key) else mask_secrets(item, depth + 1)
            for key, item in value.items()
        }
    if isinstance(value, list | tuple):
        return [mask_secrets(item, depth + 1) for item in value]
    return value
