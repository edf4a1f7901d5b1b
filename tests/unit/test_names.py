"""Slot-name rules (gateway/core/names.py; docs/protocol.md, "Slot names"), shared by every way in."""

from __future__ import annotations

import pytest

from gateway.core.names import (
    MAX_SLOT_BYTES,
    SlotNameError,
    SlotPathError,
    check_slot_name,
    decode_path_segment,
    slot_from_raw_path,
)

PREFIX = "/provider"


@pytest.mark.parametrize("name", ["pump-1", "a", "Cell 3 / Press", "café", "泵-1", "x_", "a_b", "🙂"])
def test_ordinary_names_are_accepted_unchanged(name: str) -> None:
    assert check_slot_name(name) == name


def test_empty_name_is_refused_with_an_example() -> None:
    with pytest.raises(SlotNameError, match=r"empty.*/provider/pump-1"):
        check_slot_name("")


@pytest.mark.parametrize(
    "name",
    [
        "a" * 64,
        "é" * 32,  # 2 bytes each: 64 bytes in 32 characters
        "€" * 21 + "a",  # 3 bytes each: 63 + 1
        "🙂" * 16,  # 4 bytes each
    ],
)
def test_exactly_64_bytes_of_utf8_is_accepted(name: str) -> None:
    assert len(name.encode("utf-8")) == MAX_SLOT_BYTES
    assert check_slot_name(name) == name


@pytest.mark.parametrize(
    ("name", "size"),
    [
        ("a" * 65, 65),
        ("é" * 33, 66),  # only 33 characters: the limit counts bytes
        ("€" * 21 + "ab", 65),
        ("🙂" * 16 + "a", 65),
        ("a" * 63 + "é", 65),  # a multi-byte character straddling the edge
    ],
)
def test_more_than_64_bytes_is_refused_naming_the_size(name: str, size: int) -> None:
    assert len(name) <= 65
    with pytest.raises(SlotNameError) as caught:
        check_slot_name(name)
    assert str(caught.value) == f"Slot name is {size} bytes; the limit is 64 bytes of UTF-8"


@pytest.mark.parametrize("name", ["_all", "_broker"])
def test_gateway_slots_are_reserved(name: str) -> None:
    with pytest.raises(SlotNameError) as caught:
        check_slot_name(name)
    assert str(caught.value) == f'Provider "{name}" is reserved by the broker'


@pytest.mark.parametrize("name", ["_x", "_", "_all2", "_mcp"])
def test_any_underscore_prefix_is_reserved(name: str) -> None:
    with pytest.raises(SlotNameError, match='names starting with "_" belong to the gateway'):
        check_slot_name(name)


@pytest.mark.parametrize("name", ["a\x00b", "\x1f", "line\nbreak", "tab\there", "del\x7f"])
def test_control_characters_are_refused(name: str) -> None:
    with pytest.raises(SlotNameError, match="control characters"):
        check_slot_name(name)


@pytest.mark.parametrize(
    ("name", "kind", "code_point", "position"),
    [
        ("pump\u00851", "control characters", "U+0085", 5),  # C1 NEL: a terminal shows "pump1"
        ("pump\u009b1", "control characters", "U+009B", 5),  # C1 CSI: starts a terminal escape
        ("\u202epump-1", "bidirectional controls", "U+202E", 1),  # right-to-left override
        ("pump\u2066-1\u2069", "bidirectional controls", "U+2066", 5),  # an isolate
        ("pump\u200e1", "bidirectional controls", "U+200E", 5),  # left-to-right mark
        ("\u061cpump", "bidirectional controls", "U+061C", 1),  # Arabic letter mark
        ("pump\u200b1", "format characters", "U+200B", 5),  # zero-width space
        ("pump\u200d1", "format characters", "U+200D", 5),  # zero-width joiner
        ("\ufeffpump-1", "format characters", "U+FEFF", 1),  # byte order mark
        ("pu\u00admp", "format characters", "U+00AD", 3),  # soft hyphen
        ("pump\U000e00411", "format characters", "U+E0041", 5),  # a tag character
        ("pump\u20281", "line or paragraph separators", "U+2028", 5),
        ("pump\u20291", "line or paragraph separators", "U+2029", 5),
        ("pump\ue000", "private-use characters", "U+E000", 5),
        ("\U000f0000", "private-use characters", "U+F0000", 1),
        ("pump\ufffe", "unassigned code points", "U+FFFE", 5),  # a noncharacter
        ("pump\u0378", "unassigned code points", "U+0378", 5),
    ],
)
def test_invisible_and_reordering_characters_are_refused_naming_the_code_point(
    name: str, kind: str, code_point: str, position: int
) -> None:
    with pytest.raises(SlotNameError) as caught:
        check_slot_name(name)
    message = str(caught.value)
    assert message == (
        f"Slot name contains {kind} ({code_point} at character {position}); use printable characters only"
    )
    assert name not in message  # the name itself is never quoted: it would carry the character along
    assert len(message.encode()) <= 123  # a WebSocket close reason


@pytest.mark.parametrize("name", ["_\u0085", "_all\u200b", "\u200b_x"])
def test_characters_are_checked_before_a_message_quotes_the_name(name: str) -> None:
    with pytest.raises(SlotNameError, match="use printable characters only"):
        check_slot_name(name)


@pytest.mark.parametrize("name", [".", ".."])
def test_dot_segments_are_refused(name: str) -> None:
    # A URL resolves them as path steps: http://h/../mcp is http://h/mcp, not the slot's endpoint.
    with pytest.raises(SlotNameError) as caught:
        check_slot_name(name)
    assert str(caught.value) == f'Slot name "{name}" is a path step in URLs; pick another name, e.g. pump-1'


@pytest.mark.parametrize(
    "name",
    [
        "...",
        ".pump",
        "pump.",
        "a..b",
        "Cell 3",
        "pump\u00a01",  # a no-break space: a space, visible as one
        "泵\u30001",  # an ideographic space
        "e\u0301",  # a combining accent
        "\u2764\ufe0f",  # a variation selector (emoji presentation)
        "\u05e9\u05dc\u05d5\u05dd",  # right-to-left letters without any control
    ],
)
def test_printable_names_near_the_refused_ones_are_accepted(name: str) -> None:
    assert check_slot_name(name) == name


def test_decoded_bidi_control_is_refused_when_admitted() -> None:
    name = slot_from_raw_path("/provider/pump%E2%80%AE1", PREFIX)
    assert name == "pump\u202e1"
    with pytest.raises(SlotNameError, match="bidirectional controls"):
        check_slot_name(name)


def test_lone_surrogate_from_bad_percent_encoding_is_refused() -> None:
    name = decode_path_segment("pump%FF")
    with pytest.raises(SlotNameError, match="not valid UTF-8"):
        check_slot_name(name)


# -- slot_from_raw_path -------------------------------------------------------------------------


def test_one_segment_names_the_slot() -> None:
    assert slot_from_raw_path("/provider/pump-1", PREFIX) == "pump-1"


def test_bare_prefix_is_refused_naming_both_addresses() -> None:
    with pytest.raises(SlotPathError) as caught:
        slot_from_raw_path("/provider", PREFIX)
    assert str(caught.value) == "Missing slot name: connect to /provider/<name>, or to /providers"


def test_empty_segment_is_refused() -> None:
    with pytest.raises(SlotPathError, match="Empty slot name"):
        slot_from_raw_path("/provider/", PREFIX)


@pytest.mark.parametrize("raw", ["/provider/a/b", "/provider/a/", "/provider//a"])
def test_two_segments_are_refused_with_the_fix(raw: str) -> None:
    with pytest.raises(SlotPathError, match="percent-encode the slot name after /provider/"):
        slot_from_raw_path(raw, PREFIX)


def test_path_errors_are_slot_name_errors() -> None:
    # Callers that only catch SlotNameError still refuse a bad path.
    assert issubclass(SlotPathError, SlotNameError)


@pytest.mark.parametrize("raw", ["/provider/a%2Fb", "/provider/a%2fb"])
def test_encoded_slash_stays_inside_one_segment(raw: str) -> None:
    name = slot_from_raw_path(raw, PREFIX)
    assert name == "a/b"
    assert check_slot_name(name) == "a/b"


def test_percent_encoded_utf8_is_decoded() -> None:
    assert slot_from_raw_path("/provider/caf%C3%A9", PREFIX) == "café"
    assert slot_from_raw_path("/provider/%E6%B3%B5-1", PREFIX) == "泵-1"
    assert slot_from_raw_path("/provider/Cell%203", PREFIX) == "Cell 3"


def test_decoding_happens_once() -> None:
    # %252F is an encoded "%2F", not an encoded "/".
    assert slot_from_raw_path("/provider/a%252Fb", PREFIX) == "a%2Fb"


def test_decoded_control_character_is_refused_when_admitted() -> None:
    name = slot_from_raw_path("/provider/a%00b", PREFIX)
    with pytest.raises(SlotNameError, match="control characters"):
        check_slot_name(name)


def test_decoded_byte_limit_applies_to_the_name_not_the_url() -> None:
    raw = "/provider/" + "%C3%A9" * 32  # 192 characters of URL, 64 bytes of name
    assert check_slot_name(slot_from_raw_path(raw, PREFIX)) == "é" * 32
