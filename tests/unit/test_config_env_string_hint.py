"""An environment value for a text setting that reads as JSON (a number, a boolean, null) is refused with
the quoted form to write, and that form loads: the real loader, driven with an environ mapping."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.config import ConfigError, load_config
from tests.support.written_config import write_config

NAME = "MCP_GATEWAY_TELEMETRY__SERVICE_NAME"
"""telemetry.service_name: a plain string setting (str | None)."""
HOST = "MCP_GATEWAY_HOST"
"""host: a string setting without None."""
READ_AS_JSON = "an environment value that parses as JSON is read as JSON; to give it as text, quote it as a JSON string"


@pytest.mark.parametrize(
    ("given", "kind", "quoted"),
    [
        ("0123", None, None),  # not JSON (a leading zero): already text, loads
        ("123", "a number", '"123"'),
        ("1.50", "a number", '"1.50"'),  # the value as written, not as the number reads back
        (" -7 ", "a number", '"-7"'),
        ("true", "the boolean true", '"true"'),
    ],
)
def test_a_text_setting_given_json_names_the_quoted_form(given: str, kind: str | None, quoted: str | None) -> None:
    if kind is None:
        assert load_config(environ={NAME: given}).telemetry.service_name == given
        return
    with pytest.raises(ConfigError) as refused:
        load_config(environ={NAME: given})
    assert str(refused.value) == (
        f"environment variable {NAME}: setting 'telemetry.service_name': Input should be a valid string, "
        f"not {kind}: {READ_AS_JSON}: {NAME}='{quoted}'"
    )
    # What the hint says to write loads, as the text that was meant.
    assert quoted is not None
    assert load_config(environ={NAME: quoted}).telemetry.service_name == quoted.strip('"')


def test_null_for_a_setting_that_must_be_text() -> None:
    with pytest.raises(ConfigError) as refused:
        load_config(environ={HOST: "null"})
    assert str(refused.value).endswith(f"Input should be a valid string, not null: {READ_AS_JSON}: {HOST}='\"null\"'")


def test_a_long_number_is_not_repeated() -> None:
    with pytest.raises(ConfigError) as refused:
        load_config(environ={HOST: "9" * 65})
    assert str(refused.value).endswith(f"{READ_AS_JSON}: {HOST}='\"...\"'")
    assert "9" * 65 not in str(refused.value)


def test_an_overridden_environment_value_gets_the_hint_too(tmp_path: Path) -> None:
    # The flag replaces the variable's host, but the variable's own value must still be valid.
    with pytest.raises(ConfigError) as refused:
        load_config(write_config(tmp_path, "port = 0\n"), environ={HOST: "8080"}, flags={"host": "127.0.0.1"})
    message = str(refused.value)
    assert message.startswith(f"environment variable {HOST}: setting 'host': Input should be a valid string, not a")
    assert f"{HOST}='\"8080\"'" in message and "the command-line flag for host overrides it" in message


def test_no_hint_where_no_text_was_meant(tmp_path: Path) -> None:
    # A list for a text setting, a number inside a JSON list, and a number in the file: no environment hint.
    for environ in ({HOST: "[1]"}, {"MCP_GATEWAY_ALLOWED_ORIGINS": "[1]"}):
        with pytest.raises(ConfigError) as refused:
            load_config(environ=environ)
        assert str(refused.value).endswith("Input should be a valid string"), refused.value
    with pytest.raises(ConfigError) as refused:
        load_config(write_config(tmp_path, "port = 0\nhost = 8080\n"), environ={})
    assert "JSON" not in str(refused.value)
