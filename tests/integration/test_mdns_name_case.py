"""What the gateway can advertise as its name and TXT record. Instance names that differ only in case
are one DNS name (RFC 1035 section 2.3.3, RFC 6762 section 16): a second gateway named "PLANT GW" where
"plant gw" is advertised takes "PLANT GW-2", or browsers merge the two and list one gateway. A name or
a public_url the advertiser could never send is refused when the configuration loads, not by a
warning every refresh.

The test link is tests/support/multicast.py's.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator

import orjson
import pytest

from gateway.app import GatewayServer
from gateway.config import ConfigError, GatewayConfig, load_config
from gateway.discovery.mdns import MdnsAdvertiser
from tests.conftest import GatewayFactory, wait_for
from tests.support.multicast import MulticastLink, make_multicast_link, run_discover


@pytest.fixture(scope="module")
def multicast_link() -> Iterator[MulticastLink]:
    yield from make_multicast_link()


async def advertised(gateway_factory: GatewayFactory, address: str, name: str) -> GatewayServer:
    server = await gateway_factory(host=address, insecure_lan=True, mdns={"enabled": True, "instance_name": name})
    await wait_for(lambda: server.mdns is not None and server.mdns.state == "advertising", 15, name)
    return server


async def test_a_name_held_in_other_case_is_taken_and_the_second_gateway_renames(
    multicast_link: MulticastLink, gateway_factory: GatewayFactory
) -> None:
    tag = secrets.token_hex(3)
    lower, upper = f"plant gw {tag}", f"PLANT GW {tag.upper()}"
    first = await advertised(gateway_factory, multicast_link.address, lower)
    second = await advertised(gateway_factory, multicast_link.address, upper)
    assert first.mdns is not None and second.mdns is not None
    assert (first.mdns.instance_in_use, second.mdns.instance_in_use) == (lower, f"{upper}-2")
    code, out, err = await run_discover("--json", "--interface", multicast_link.address)
    assert code == 0, err
    listed = {entry["name"]: entry["port"] for entry in orjson.loads(out)}
    assert listed == {lower: first.port, f"{upper}-2": second.port}, out


@pytest.mark.parametrize(
    ("name", "reason"),
    [
        ("_sub", "cannot start with '_'"),
        ("_pumps", "cannot start with '_'"),
        ("pump\u00851", "control characters (U+0085 at character 5)"),
        ("pump\u202e1", "bidirectional controls (U+202E at character 5)"),
        ("pump\u200b1", "format characters (U+200B at character 5)"),
        ("pump\u20281", "line or paragraph separators (U+2028 at character 5)"),
    ],
)
def test_an_instance_name_that_cannot_be_advertised_or_shown_is_refused_at_load(name: str, reason: str) -> None:
    with pytest.raises(ConfigError, match=r"mdns\.instance_name") as caught:
        load_config(environ={}, flags={"mdns.instance_name": name})
    assert reason in str(caught.value)


def test_an_instance_name_with_spaces_and_letters_of_any_script_loads() -> None:
    for name in ("Line 3 gateway", "Pumpenhalle\u00a0Süd", "ポンプ 1", "pump_1"):
        assert load_config(environ={}, flags={"mdns.instance_name": name}).mdns.instance_name == name


def test_a_public_url_too_long_for_its_txt_entry_is_refused_at_load() -> None:
    fits = "https://gw.plant.lan:3000/" + "a" * (251 - len("https://gw.plant.lan:3000/"))
    assert load_config(environ={}, flags={"public_url": fits + "/"}).public_url == fits + "/"
    with pytest.raises(ConfigError, match=r"public_url") as caught:
        load_config(environ={}, flags={"public_url": fits + "a"})
    assert "252 bytes; a public_url is at most 251 bytes" in str(caught.value)


async def test_the_advertiser_names_the_txt_entry_too_long_to_send(multicast_link: MulticastLink) -> None:
    """A record the configuration would refuse (built past its checks): the failure names the entry,
    where python-zeroconf said only "bytes must be in range(0, 256)"."""
    config = GatewayConfig.model_validate({"host": multicast_link.address, "mdns": {"enabled": True}})
    config = config.model_copy(update={"public_url": "https://gw.plant.lan:3000/" + "a" * 260})
    advertiser = MdnsAdvertiser(config, [multicast_link.address], 56099)
    advertiser.start()
    try:
        await wait_for(lambda: advertiser.state == "failed", 10, "the advertiser to fail")
        assert advertiser.reason.startswith("ValueError: the TXT entry url=... is 290 bytes, more than the 255")
        assert "public_url" in advertiser.reason
    finally:
        await advertiser.stop()
