"""Free ports for test and benchmark children are drawn below the kernel's ephemeral range."""

from __future__ import annotations

import socket
from pathlib import Path

from bench.ports import LOWEST_PORT, bindable, ephemeral_low, free_port


def range_file(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "ip_local_port_range"
    path.write_text(text)
    return path


def test_a_port_is_drawn_below_the_ephemeral_range(tmp_path: Path) -> None:
    ports = {free_port(range_file(tmp_path, "32768\t60999\n")) for _ in range(20)}
    assert all(LOWEST_PORT <= port < 32768 for port in ports)
    assert all(bindable(port) for port in ports)


def test_ports_taken_one_after_another_are_all_different(tmp_path: Path) -> None:
    # Nothing binds them in between, as when a test takes a gateway's, a server's and a broker's port.
    narrow = range_file(tmp_path, f"{LOWEST_PORT + 1000} 60999")
    ports = [free_port(narrow) for _ in range(200)]
    assert len(set(ports)) == len(ports)


def test_the_machines_own_range_is_read() -> None:
    low = ephemeral_low()
    assert low is None or 0 < low < 65536


def test_an_unreadable_or_crowded_range_falls_back_to_a_port_the_kernel_picks(tmp_path: Path) -> None:
    for text in ("", "not numbers", f"{LOWEST_PORT + 10} 60999"):
        port = free_port(range_file(tmp_path, text))
        assert 0 < port < 65536 and bindable(port)
    assert 0 < free_port(tmp_path / "absent") < 65536


def test_a_port_someone_listens_on_is_not_bindable() -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", free_port()))
        listener.listen()
        assert not bindable(listener.getsockname()[1])
