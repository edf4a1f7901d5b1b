"""paho's wait on poll(): select's answers for the sockets paho watches, at any descriptor number."""

from __future__ import annotations

import select
import socket

import paho.mqtt.client as paho_client
import pytest

from gateway.southbound.mqtt import paho_select


def test_readable_and_writable_sockets_are_reported_as_select_reports_them() -> None:
    left, right = socket.socketpair()
    try:
        assert paho_select.poll_select([left], [], [], 0) == ([], [], [])
        assert paho_select.poll_select([left], [left], [], 0) == ([], [left], [])
        right.send(b"x")
        assert paho_select.poll_select([left, right], [], [], 1.0) == ([left], [], [])
        assert select.select([left, right], [], [], 1.0)[0] == [left]  # the same answer
        right.close()
        left.recv(1)
        assert paho_select.poll_select([left], [], [], 1.0)[0] == [left]  # a hang-up reads as readable
    finally:
        left.close()
        right.close()


def test_what_select_refuses_is_refused_with_its_exceptions() -> None:
    closed = socket.socket()
    closed.close()
    with pytest.raises(ValueError):
        paho_select.poll_select([closed], [], [], 0)  # fileno() is -1 once closed
    with pytest.raises(TypeError):
        paho_select.poll_select([object()], [], [], 0)


def test_installing_gives_paho_the_poll_wait_once() -> None:
    paho_select.install()
    paho_select.install()
    assert paho_client.select.select is paho_select.poll_select  # type: ignore[attr-defined]
    assert paho_client.select.POLLIN == select.POLLIN  # type: ignore[attr-defined]
