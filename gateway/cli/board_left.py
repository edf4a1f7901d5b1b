"""What a failed or stopped `device install` or `device update` says about the board it leaves.

How far the command got (`Progress`), the reset that puts the board back to the code it holds, and
the sentences that name the board's state: [board-gone] when it stopped answering, [interrupted]
when Ctrl-C, SIGTERM or SIGHUP (a closed terminal, a dropped SSH session) stopped the command.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gateway.devices.registry import SlotTaken
    from gateway.provision.raw_repl import BoardGone

BEFORE_THE_BOARD = "before the board was touched"
"""The step of a command stopped before it opened the port."""
SWAP = "the swap"
"""The step that renames the copied files into place: never interrupted, and what it leaves is said as such."""


@dataclass
class Progress:
    """How far an install or update got on the board, for what a failure says about it."""

    step: str = "opening the raw REPL"
    device_id: str | None = None
    files: bool = False
    """The new code is in place (the swap ran). During the swap, step is SWAP."""
    config: bool = False
    """The new config.json is in place."""
    adopted: bool = False
    broker_user: bool | None = None
    """An MQTT install, adopted: whether the board's password is in mosquitto's password file (None: not yet asked)."""


def restarted(repl: Any, progress: Progress) -> str:
    """Reset the board after a failure, so that it runs what it holds; the sentence that says so. During
    the swap the reset sends no Ctrl-C (RawRepl.restart): it waits for the swap to end."""
    from gateway.provision.raw_repl import BoardError

    try:
        repl.restart()
    except BoardError as exc:
        wait = "wait a minute for the swap to end, then " if progress.step == SWAP else ""
        return f"; the board could not be reset ({exc}): {wait}reset it by hand (its EN/RESET button, or power)"
    if progress.step == SWAP:
        return "; the board was reset once the swap ended and runs the code it holds"
    if not progress.files:
        return "; the board was reset and runs its previous code again"
    return "; the board was reset and runs the code it holds now"


def board_state(progress: Progress, taken: SlotTaken | None = None) -> str:
    """What the board holds, from how far the command got; `taken`: the adoption that stopped it."""
    if progress.adopted and progress.broker_user is False:
        return (
            "the board holds the new code and config.json and is adopted, but its password is not in mosquitto's "
            "password file: run the install again once the file can be written"
        )
    if progress.adopted:
        return "the board holds the new code and config.json and is adopted"
    if progress.config and taken is not None:
        return (
            "the board holds the new code and a new config.json whose secret the registry does not know: slot "
            f"taken by {taken.device_id} while it was written"
        )
    if progress.config:
        return (
            "the board holds the new code and a new config.json whose secret the registry does not know: "
            "run the install again once the registry is usable"
        )
    if progress.files:
        return "the board holds the new code and its previous config.json"
    if progress.step == SWAP:
        return "the board may hold a mix of old and new files (the swap to the new files had begun)"
    if progress.step == "the copy":
        return "the new files copied in part (*.new) stay on the board unused; its code is as it was"
    return "nothing was written to the board"


def failed_text(error: Exception, progress: Progress, reset: str, command: str) -> str:
    """A failure on the board: the error, what the board holds, its reset, and a rerun when the swap was cut."""
    again = f". Run the same {command} again: it starts over" if progress.step == SWAP else ""
    return f"{error}; {board_state(progress)}{reset}{again}"


def gone_text(port: str, gone: BoardGone, progress: Progress, command: str) -> str:
    """[board-gone]: where the board stopped answering, what it may hold, and that a rerun starts over."""
    if progress.step in ("opening the raw REPL", "the probe"):
        state = "nothing was written to it"
    elif progress.step == "the copy":
        state = "its code is as it was (new files copied in part, *.new, stay unused)"
    else:
        state = board_state(progress).replace("the board holds", "it holds")
    registry = "" if progress.adopted else "; the registry was not changed"
    return (
        f"the board on {port} went away during {progress.step} ({gone.detail}): {state}{registry}. Plug it in "
        f"again and run the same {command} again: it starts over [board-gone]"
    )


def stop_name(stop: KeyboardInterrupt) -> str:
    """What stopped the command: "Ctrl-C (SIGINT)", or the signal a `Stopped` names (SIGTERM, SIGHUP)."""
    from gateway.flash.handover import Stopped

    return str(stop) if isinstance(stop, Stopped) else "Ctrl-C (SIGINT)"


def stop_exit_code(stop: KeyboardInterrupt) -> int:
    """128 plus the signal's number, as a shell reports a command a signal ended: 130, 143, 129."""
    from gateway.flash.handover import Stopped

    return stop.exit_code if isinstance(stop, Stopped) else 130


def interrupted_text(port: str, stop: KeyboardInterrupt, progress: Progress, reset: str, command: str) -> str:
    """[interrupted]: what stopped the command, during which step, what the board holds and that it was reset."""
    if progress.step in (BEFORE_THE_BOARD, "opening the raw REPL", "the probe"):
        state = "nothing was written to the board"
    elif progress.step == "the copy":
        state = (
            "the copy was cut short: the new files copied in part (*.new) stay on the board unused until the next "
            f"{command} replaces them"
        )
    else:
        state = board_state(progress)
    when = progress.step if progress.step == BEFORE_THE_BOARD else f"during {progress.step}"
    registry = "" if progress.adopted else "; the registry was not changed"
    return (
        f"the {command} on {port} was stopped by {stop_name(stop)} {when}: {state}{registry}{reset}. "
        f"Run the same {command} again: it starts over [interrupted]"
    )
