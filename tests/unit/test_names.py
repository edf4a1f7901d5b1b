"""Slot-name rules of WIRE.md §2.1 (gateway/core/names.py), shared by every way in."""

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
