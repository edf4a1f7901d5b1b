"""Run a module as `python -m` would, with cProfile switched on and off from outside by signals.

    python -m bench.profiled OUT.prof gateway.cli run --port 3001

SIGUSR1 starts counting (and creates `OUT.prof.on` once it has); SIGUSR2 stops and writes the
statistics to `OUT.prof`. Only the stretch between the two signals is counted, so start-up and
imports stay out of a per-call figure. A measuring aid for `bench.relay_calls`, not for production.
"""

from __future__ import annotations

import cProfile
import os
import runpy
import signal
import sys
from pathlib import Path
from types import FrameType


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print("usage: python -m bench.profiled OUT.prof MODULE [ARGS...]", file=sys.stderr)
        return 2
    out, module, *args = argv
    marker = Path(f"{out}.on")
    marker.unlink(missing_ok=True)
    Path(out).unlink(missing_ok=True)
    profile = cProfile.Profile()

    def start(_signum: int, _frame: FrameType | None) -> None:
        profile.enable()
        marker.touch()

    def stop(_signum: int, _frame: FrameType | None) -> None:
        profile.disable()
        profile.dump_stats(f"{out}.part")
        os.replace(f"{out}.part", out)  # whole or absent: the reader polls for it

    signal.signal(signal.SIGUSR1, start)
    signal.signal(signal.SIGUSR2, stop)
    sys.argv = [module, *args]
    try:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else 0
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
