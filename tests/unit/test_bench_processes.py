"""bench/processes.py: the CPU clock the benchmarks read per process."""

from __future__ import annotations

import os
import threading
import time

from bench.processes import cpu_seconds


def _spin(seconds: float) -> None:
    started = time.thread_time()
    while time.thread_time() - started < seconds:
        pass


def test_cpu_time_of_a_process_does_not_fall_when_one_of_its_threads_ends() -> None:
    # The SDK server's anyio worker threads end after idling: summed over the live threads only, the
    # server's CPU fell between two readings and a round's CPU per call came out negative.
    pid = os.getpid()
    worker = threading.Thread(target=_spin, args=(0.05,))
    worker.start()
    worker.join(0.01)
    before = cpu_seconds(pid)  # the worker is still alive here, and has run
    worker.join()
    _spin(0.01)
    after = cpu_seconds(pid)
    assert after >= before + 0.009  # this thread's 10 ms at least; nothing of the ended worker lost
