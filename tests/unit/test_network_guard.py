import socket

import pytest

from tests.conftest import ForbiddenConnection


def test_guard_refuses_private_address_outside_lab() -> None:
    with socket.socket() as sock, pytest.raises(ForbiddenConnection):
        sock.connect(("10.1.2.5", 8006))


def test_guard_allows_loopback() -> None:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(1)
        with socket.socket() as client:
            client.connect(server.getsockname())
            assert client.getpeername() == server.getsockname()
