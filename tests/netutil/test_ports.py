"""free_port gives a loopback port nobody holds; port_open sees a listener come and go."""

import socket

from ragindex.netutil import free_port, port_open


def test_a_free_port_can_be_bound_and_port_open_follows_its_listener() -> None:
    port = free_port()
    assert not port_open(port)
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as server:
        server.bind(("127.0.0.1", port))
        server.listen()
        assert port_open(port)
    assert not port_open(port)
