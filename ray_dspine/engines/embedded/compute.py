"""The one thread that runs the embedded engines' torch work in a process.

Rule. Every model load, prefill chunk and verify step of every EmbeddedEngine in a process (and the
benchmark's peer decoder beside them) runs on one thread, the compute thread, started on first use and
kept for the life of the process. A caller hands it a function with `run` (blocking) or `call`
(awaitable) and gets the function's result or exception back. A call made on the compute thread
itself runs inline, so nested calls cannot deadlock. Calls run one at a time, first come first served.
Why. torch's CPU kernels run their parallel parts on OpenMP (libgomp), and every thread that enters a
parallel region keeps its own team of helper threads. libgomp lets idle helpers spin-wait for the next
region only while the threads it manages are no more than the available cores; with more (GOMP_SPINCOUNT
in GCC's libgomp manual: 100 spins when OMP_WAIT_POLICY is unset), they sleep on a futex, and every
one of the hundreds of small kernels in a forward pass must wake them again. On 2 cores, two threads
doing torch work (a loader thread and the engine's worker, or two engines' workers) are enough: a
one-token forward of the 135M model took 58 ms on a worker thread next to another thread's team,
with about 480 voluntary context switches per forward, against 34 ms and none when one thread did all
of the process's torch work.
"""

from __future__ import annotations

import asyncio
import queue
import threading
from concurrent.futures import Future
from typing import Callable, TypeVar

T = TypeVar("T")

THREAD_NAME = "dspine-compute"

_lock = threading.Lock()
_work: queue.SimpleQueue | None = None
_thread: threading.Thread | None = None


def _settle(future: Future, fn: Callable, args: tuple, kwargs: dict) -> None:
    try:
        future.set_result(fn(*args, **kwargs))
    except BaseException as exc:  # handed back to the caller, never the end of the thread
        future.set_exception(exc)


def _serve(work: queue.SimpleQueue) -> None:
    while True:
        future, fn, args, kwargs = work.get()
        if future.set_running_or_notify_cancel():
            _settle(future, fn, args, kwargs)


def _queue() -> queue.SimpleQueue:
    global _work, _thread
    with _lock:
        if _work is None:
            _work = queue.SimpleQueue()
            # Daemon: a call still running when the interpreter exits must not hold the exit.
            _thread = threading.Thread(target=_serve, args=(_work,), name=THREAD_NAME, daemon=True)
            _thread.start()
        return _work


def on_compute_thread() -> bool:
    return _thread is not None and threading.current_thread() is _thread


def submit(fn: Callable[..., T], *args, **kwargs) -> Future:
    """Queue fn(*args, **kwargs) for the compute thread; a Future of its result."""
    future: Future = Future()
    if on_compute_thread():
        _settle(future, fn, args, kwargs)
    else:
        _queue().put((future, fn, args, kwargs))
    return future


def run(fn: Callable[..., T], *args, **kwargs) -> T:
    """fn(*args, **kwargs) on the compute thread; blocks the caller until it returns or raises."""
    return submit(fn, *args, **kwargs).result()


async def call(fn: Callable[..., T], *args, **kwargs) -> T:
    """fn(*args, **kwargs) on the compute thread, awaited without blocking the event loop."""
    return await asyncio.wrap_future(submit(fn, *args, **kwargs))
