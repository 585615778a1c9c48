"""Free loopback ports for servers the tests start.

A port is taken between Ray's worker ports (10002-19999) and the kernel's ephemeral range (32768 up on Linux,
where every port a process binds without naming one comes from: Ray's, Serve's and uvicorn's own). A port
found by binding port 0 lies in that range, and between the test picking it and its server binding it, any
process of the stack can take it.
"""

from __future__ import annotations

import random
import socket

LOW, HIGH = 20000, 32768


def free_port(rng: random.Random | None = None) -> int:
    """A port nothing listens on now, from LOW to HIGH - 1."""
    for port in (rng or random).sample(range(LOW, HIGH), 100):
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port between {LOW} and {HIGH - 1}")
