"""The tests' port picker (tests/free_ports.py)."""

import random
import socket

import pytest

from free_ports import HIGH, LOW, free_port


class Order:
    """A stand-in for random.Random whose sample is the given ports, in order."""

    def __init__(self, ports):
        self.ports = ports

    def sample(self, population, k):
        assert (population.start, population.stop, k) == (LOW, HIGH, 100)
        return self.ports


def test_a_port_is_outside_the_kernels_ephemeral_range():
    port = free_port(random.Random(7))
    assert 20000 <= port <= 32767


def test_a_port_something_listens_on_is_passed_over():
    with socket.socket() as held:
        held.bind(("127.0.0.1", free_port()))
        held.listen()
        taken = held.getsockname()[1]
        other = free_port()  # not `taken`: binding it fails while it is held
        assert free_port(Order([taken, other])) == other
        with pytest.raises(RuntimeError, match="no free port between 20000 and 32767"):
            free_port(Order([taken]))
