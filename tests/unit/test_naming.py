"""Tool names in the aggregate (gateway/core/naming.py): `<slot>-<tool>`, safe, <= 64, unique
(docs/protocol-clients.md, "`_all`")."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.core.naming import MAX_NAME, NameBook, aggregate_names, base_name, name_part, sanitize

SAFE_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


def test_name_is_slot_dash_tool() -> None:
    assert base_name("pump-1", "read_pressure") == "pump-1-read_pressure"
    assert aggregate_names([("pump-1", "start")]) == {"pump-1-start": ("pump-1", "start")}


def test_separator_can_be_configured() -> None:
    assert base_name("pump-1", "start", separator="_") == "pump-1_start"


@pytest.mark.parametrize(
    ("slot", "tool", "expected"),
    [
        ("cell 3", "get.status", "cell_3-get_status"),
        ("a/b", "x:y", "a_b-x_y"),
        ("pump", "café", "pump-caf__850f7dc4"),  # one underscore per character, and the name's hash
        ("pump", "启动", "pump-___56410fc6"),
        ("ok", "tab\there", "ok-tab_here"),
    ],
)
def test_characters_outside_the_safe_set_become_underscores(slot: str, tool: str, expected: str) -> None:
    assert base_name(slot, tool) == expected


def test_ascii_slot_names_are_not_hashed() -> None:
    assert name_part("pump-1") == "pump-1"
    assert name_part("cell 3") == "cell_3"
    assert base_name("lab.pump", "start") == "lab_pump-start"


def test_a_non_ascii_slot_name_carries_a_hash_of_itself() -> None:
    # Pinned: clients echo these names, so they must not change between gateway versions or starts.
    assert base_name("小智-客厅", "self.audio_speaker.set_volume") == "__-___b57bdb4e-self_audio_speaker_set_volume"
    assert base_name("小智-客厅", "self.audio_speaker.set_volume", "__") == (
        "__-___b57bdb4e__self_audio_speaker_set_volume"
    )
    assert base_name("café", "lire") == "caf__850f7dc4-lire"


def test_non_ascii_tools_of_one_slot_get_distinct_names_whatever_the_order() -> None:
    # A lamp's on and off: without the hash both read lamp-____, numbered by the order first listed.
    tools = ["打开灯光", "关闭灯光"]
    names = aggregate_names([("lamp", tool) for tool in tools])
    assert names == aggregate_names([("lamp", tool) for tool in reversed(tools)])
    assert sorted(names) == sorted(base_name("lamp", tool) for tool in tools)


def test_non_ascii_slots_of_one_length_get_distinct_names_whatever_the_order() -> None:
    rooms = ["小智-客厅", "小智-卧室", "小智-书房"]
    tool = "self.audio_speaker.set_volume"
    names = aggregate_names([(room, tool) for room in rooms])
    reversed_names = aggregate_names([(room, tool) for room in reversed(rooms)])
    assert names == reversed_names
    assert all(not name.endswith(("-2", "-3")) for name in names)
    assert {pair[0] for pair in names.values()} == set(rooms)
    book = NameBook("__")
    for room in reversed(rooms):  # joining one by one, in another order
        book.names_for([(room, tool)])
    assert {name.replace("__self", "-self") for name in book.by_name} == set(names)


def test_a_long_non_ascii_slot_name_is_cut_with_the_pair_hash() -> None:
    slot = "小智-客厅" * 4
    name = base_name(slot, "x" * 60)
    assert len(name) == MAX_NAME
    assert re.fullmatch(r"[A-Za-z0-9_-]{55}-[0-9a-f]{8}", name)
    assert name[:55].startswith(name_part(slot))
    assert base_name(slot, "x" * 60) != base_name("小智-卧室" * 4, "x" * 60)


def test_a_non_ascii_slot_owns_its_namespace_by_its_written_form() -> None:
    # With "_" as separator, slot "a" offering "_<hash>_x" reads like slot "aé" offering "x": the name
    # lies in aé's namespace (its written form "a__<hash>" is the longer slot part), so aé keeps it.
    part = name_part("aé")
    intruder = ("a", part[2:] + "_x")
    owner = ("aé", "x")
    for order in ([intruder, owner], [owner, intruder]):
        names = aggregate_names(order, separator="_")
        assert names[f"{part}_x"] == owner
        assert names[f"{part}_x-2"] == intruder


def test_sanitize_keeps_safe_characters() -> None:
    assert sanitize("Az09_-") == "Az09_-"


def test_exactly_64_characters_is_not_cut() -> None:
    slot, tool = "s" * 30, "t" * 33  # 30 + 1 + 33 = 64
    assert base_name(slot, tool) == f"{slot}-{tool}"


def test_too_long_name_is_cut_and_given_a_hash_of_the_full_pair() -> None:
    name = base_name("pump-station-north-" + "x" * 30, "read_pressure_sensor_" + "y" * 20)
    assert len(name) == MAX_NAME
    # Pinned: clients echo these names, so they must not change between gateway versions.
    assert name == "pump-station-north-xxxxxxxxxxxxxxxxxxxxxxxxxxxxxx-read_-97ff674f"
    assert re.fullmatch(r"[A-Za-z0-9_-]{55}-[0-9a-f]{8}", name)


def test_hash_suffix_is_deterministic() -> None:
    slot, tool = "s" * 50, "t" * 50
    assert base_name(slot, tool) == base_name(slot, tool)
    assert aggregate_names([(slot, tool)]) == aggregate_names([(slot, tool)])


def test_long_pairs_sharing_a_prefix_get_different_names() -> None:
    slot = "s" * 40
    first = base_name(slot, "t" * 30 + "_open")
    second = base_name(slot, "t" * 30 + "_shut")
    assert first[:55] == second[:55]
    assert first != second


def test_hash_is_of_the_unsanitised_pair() -> None:
    # "a.b" and "a_b" sanitise alike; the hash still tells the long forms apart.
    assert base_name("a.b" + "s" * 60, "t") != base_name("a_b" + "s" * 60, "t")


def test_collision_goes_to_the_slot_written_unchanged_and_numbers_the_rest_in_order() -> None:
    # a_b is written as it is named and owns the namespace both read as; a.b is suffixed though first.
    names = aggregate_names([("a.b", "c"), ("a_b", "c"), ("a-b", "c"), ("a", "b-c")])
    assert names == {
        "a_b-c": ("a_b", "c"),
        "a_b-c-2": ("a.b", "c"),
        "a-b-c": ("a-b", "c"),
        "a-b-c-2": ("a", "b-c"),
    }
    assert list(names) == ["a_b-c-2", "a_b-c", "a-b-c", "a-b-c-2"]


def test_third_collision_gets_dash_3() -> None:
    names = aggregate_names([("x y", "t"), ("x.y", "t"), ("x:y", "t")])
    assert list(names) == ["x_y-t", "x_y-t-2", "x_y-t-3"]


def test_collision_of_a_64_character_base_stays_within_64() -> None:
    # Three distinct pairs whose names differ only in characters the rule replaces.
    slot, tool = "s" * 30, "t" * 32
    names = list(aggregate_names([(slot, tool + "."), (slot, tool + " "), (slot, tool + ":")]))
    assert names == [f"{slot}-{tool}_", f"{slot}-{'t' * 31}-2", f"{slot}-{'t' * 31}-3"]
    assert all(len(name) == MAX_NAME for name in names)


def test_collision_of_a_hashed_base_stays_within_64() -> None:
    slot = "a" * 70
    first = base_name(slot, "x")
    # A pair whose plain name happens to equal the first pair's hashed name.
    names = list(aggregate_names([(slot, "x"), (first[:55], first[56:])]))
    assert names == [first, first[:62] + "-2"]
    assert all(len(name) == MAX_NAME for name in names)


def test_a_numbered_name_taken_by_a_later_base_is_numbered_again() -> None:
    names = aggregate_names([("a", "b"), ("a", "b."), ("a", "b-2")])
    assert names == {"a-b": ("a", "b"), "a-b_": ("a", "b."), "a-b-2": ("a", "b-2")}
    names = aggregate_names([("a", "b"), ("a.", "b"), ("a", "b-2")])
    assert names == {"a-b": ("a", "b"), "a_-b": ("a.", "b"), "a-b-2": ("a", "b-2")}
    names = aggregate_names([("a", "b"), ("a", "b "), ("a", "b_"), ("a", "b-2")])
    assert list(names) == ["a-b", "a-b_", "a-b_-2", "a-b-2"]


def test_tenth_collision_of_a_64_character_base_stays_within_64() -> None:
    slot, tool = "s" * 30, "t" * 32
    unsafe = " .:;,!?@#$%&"
    names = list(aggregate_names([(slot, tool + char) for char in unsafe]))
    assert len(set(names)) == 12
    assert names[-1] == f"{slot}-{'t' * 30}-12"
    assert all(len(name) == MAX_NAME for name in names)


# -- properties ---------------------------------------------------------------------------------

any_text = st.text(max_size=80)
entries_strategy = st.lists(st.tuples(any_text, any_text), max_size=25)
# Few distinct characters make collisions (after sanitising and cutting) likely.
clashing_text = st.text(alphabet="ab.-_ é", max_size=70)
clashing_entries = st.lists(st.tuples(clashing_text, clashing_text), max_size=25)


@settings(database=None, max_examples=100, deadline=None)
@given(entries_strategy)
def test_every_name_is_safe_and_every_entry_gets_its_own(entries: list[tuple[str, str]]) -> None:
    entries = list(dict.fromkeys(entries))  # the aggregate never lists one (slot, tool) twice
    names = aggregate_names(entries)
    assert all(SAFE_NAME.fullmatch(name) for name in names)
    # Nothing is dropped and the caller's order is kept (names are dict keys, hence unique).
    assert list(names.values()) == entries


@settings(database=None, max_examples=100, deadline=None)
@given(clashing_entries)
def test_names_stay_safe_and_unique_under_heavy_collisions(entries: list[tuple[str, str]]) -> None:
    entries = list(dict.fromkeys(entries))
    names = aggregate_names(entries)
    assert all(SAFE_NAME.fullmatch(name) for name in names)
    assert list(names.values()) == entries


@settings(database=None, max_examples=50, deadline=None)
@given(clashing_entries)
def test_same_membership_in_the_same_order_gives_the_same_names(entries: list[tuple[str, str]]) -> None:
    assert aggregate_names(entries) == aggregate_names(list(entries))


def test_name_book_keeps_a_name_when_a_colliding_slot_joins_first_in_order() -> None:
    book = NameBook()
    assert book.names_for([("a-b", "c")]) == {"a-b-c": ("a-b", "c")}
    # Slot "a" sorts before "a-b", but the name "a-b-c" already means ("a-b", "c").
    assert book.names_for([("a", "b-c"), ("a-b", "c")]) == {"a-b-c-2": ("a", "b-c"), "a-b-c": ("a-b", "c")}


def test_name_book_never_gives_a_departed_pairs_name_to_another_pair() -> None:
    book = NameBook()
    book.names_for([("a-b", "c")])
    assert book.names_for([("a", "b-c")]) == {"a-b-c-2": ("a", "b-c")}
    # The pair that left gets its own name back when it returns.
    assert book.names_for([("a", "b-c"), ("a-b", "c")])["a-b-c"] == ("a-b", "c")


def test_name_book_forgets_the_oldest_departed_names_beyond_its_bound() -> None:
    book = NameBook(max_retired=2)
    for index in range(5):
        book.names_for([(f"s{index}", "t")])
    assert len(book.by_pair) == 3  # the present pair and the two most recently departed
    assert ("s0", "t") not in book.by_pair
    assert ("s3", "t") in book.by_pair


def test_fresh_name_book_matches_aggregate_names() -> None:
    entries = [("a", "b-c"), ("a-b", "c"), ("x" * 70, "y"), ("a", "b c")]
    assert NameBook().names_for(entries) == aggregate_names(entries)


# -- a name belongs to the slot it names ----------------------------------------------------------------


def test_a_name_in_a_longer_slots_namespace_is_that_slots_whatever_sorts_first() -> None:
    # Slot "pump" sorts first, but the README's name pump-1-stop must reach pump-1's stop.
    names = aggregate_names([("pump", "1-stop"), ("pump-1", "stop")])
    assert names == {"pump-1-stop-2": ("pump", "1-stop"), "pump-1-stop": ("pump-1", "stop")}


def test_a_shorter_slots_pair_gives_the_name_up_when_the_slot_it_names_comes() -> None:
    book = NameBook()
    assert book.names_for([("pump", "1-stop")]) == {"pump-1-stop": ("pump", "1-stop")}
    # pump-1 is there but has no stop: the name stays pump's.
    assert book.names_for([("pump", "1-stop"), ("pump-1", "start")])["pump-1-stop"] == ("pump", "1-stop")
    names = book.names_for([("pump", "1-stop"), ("pump-1", "start"), ("pump-1", "stop")])
    assert names == {
        "pump-1-stop-2": ("pump", "1-stop"),
        "pump-1-start": ("pump-1", "start"),
        "pump-1-stop": ("pump-1", "stop"),
    }
    # A suffixed name lies in pump-1's namespace too: pump-1's own tool stop-2 takes it.
    names = book.names_for([("pump", "1-stop"), ("pump-1", "stop"), ("pump-1", "stop-2")])
    assert names == {
        "pump-1-stop-3": ("pump", "1-stop"),
        "pump-1-stop": ("pump-1", "stop"),
        "pump-1-stop-2": ("pump-1", "stop-2"),
    }


def test_a_departed_holder_of_a_shorter_slot_gives_the_name_up_too() -> None:
    book = NameBook()
    book.names_for([("pump", "1-stop")])
    book.names_for([])  # pump left
    assert book.names_for([("pump-1", "stop")]) == {"pump-1-stop": ("pump-1", "stop")}
    assert book.names_for([("pump", "1-stop"), ("pump-1", "stop")])["pump-1-stop-2"] == ("pump", "1-stop")


def test_the_longest_present_slot_owns_a_name() -> None:
    entries = [("a", "b-c-d"), ("a-b", "c-d"), ("a-b-c", "d")]
    assert aggregate_names(entries) == {
        "a-b-c-d-2": ("a", "b-c-d"),
        "a-b-c-d-3": ("a-b", "c-d"),
        "a-b-c-d": ("a-b-c", "d"),
    }
    # Without a-b-c, a-b is the longest present slot the name starts with.
    assert aggregate_names(entries[:2]) == {"a-b-c-d-2": ("a", "b-c-d"), "a-b-c-d": ("a-b", "c-d")}


def test_a_name_given_up_by_a_displaced_pair_never_means_another_pair() -> None:
    book = NameBook()
    book.names_for([("a", "b-c-d")])
    book.names_for([("a", "b-c-d"), ("a-b-c", "e")])
    # a-b's c-d lies in a-b-c's namespace while a-b-c is present: it is suffixed.
    assert book.names_for([("a", "b-c-d"), ("a-b", "c-d"), ("a-b-c", "e")])["a-b-c-d-2"] == ("a-b", "c-d")
    # a-b-c left: the name is a-b's now, and a-b-c-d-2 stays a-b's, so slot a's pair is numbered anew.
    names = book.names_for([("a", "b-c-d"), ("a-b", "c-d")])
    assert names == {"a-b-c-d-3": ("a", "b-c-d"), "a-b-c-d": ("a-b", "c-d")}
    assert book.by_name["a-b-c-d-2"] == ("a-b", "c-d")


# Names of a few words, split into slot and tool at any "-": many pairs read alike.
split_pairs = st.lists(st.sampled_from(["a", "b", "ab"]), min_size=2, max_size=4).flatmap(
    lambda words: st.integers(1, len(words) - 1).map(lambda cut: ("-".join(words[:cut]), "-".join(words[cut:])))
)


@settings(database=None, max_examples=200, deadline=None)
@given(st.lists(st.lists(split_pairs, max_size=8), min_size=1, max_size=6))
def test_a_pair_whose_name_no_other_slot_could_claim_always_gets_its_plain_name(
    calls: list[list[tuple[str, str]]],
) -> None:
    # Slots come and go between calls; a pair whose name lies in no other slot's namespace (of any slot
    # ever seen at least as long as its own) is named <slot>-<tool>, whatever came before.
    book = NameBook()
    seen: set[str] = set()
    for call in calls:
        entries = list(dict.fromkeys(call))
        seen |= {slot for slot, _ in entries}
        names = book.names_for(entries)
        assert list(names.values()) == entries
        for slot, tool in entries:
            base = f"{slot}-{tool}"
            rivals = [other for other in seen if other != slot and len(other) >= len(slot)]
            if not any(base.startswith(other + "-") for other in rivals):
                assert names[base] == (slot, tool)
