"""The named errors of `mcp-gateway flash`, each with its exit code (docs/field.md lists them)."""

from __future__ import annotations

EXIT_CODES: dict[str, int] = {
    "firmware-not-found": 10,
    "not-an-image": 11,
    "checksum-mismatch": 12,
    "wrong-chip": 13,
    "image-too-big": 14,
    "no-port": 20,
    "permission-denied": 21,
    "port-in-use": 22,
    "not-in-download-mode": 23,
    "board-error": 30,
    "verify-failed": 31,
}
"""Error code -> exit code. 0 is success; 2 is a mistake on the command line (argparse)."""


class FlashError(Exception):
    """A failure the technician can act on: `code` names it, the message says what to do."""

    def __init__(self, code: str, message: str) -> None:
        if code not in EXIT_CODES:
            raise ValueError(f"unknown flash error code {code!r}")
        super().__init__(message)
        self.code = code
        self.message = message

    @property
    def exit_code(self) -> int:
        return EXIT_CODES[self.code]


def esptool_text(exc: BaseException) -> str:
    """The message of an exception esptool raised, as a sentence.

    esptool raises some errors printf-style, `RuntimeError("... (0x%02x) ...", value)`, which str()
    shows as the raw tuple; the format is applied here. Any other exception: its message (the first
    argument), else its type's name.
    """
    args = exc.args
    if len(args) >= 2 and isinstance(args[0], str) and "%" in args[0]:
        try:
            return args[0] % args[1:]
        except (TypeError, ValueError):  # not a format for these values after all
            pass
    if isinstance(exc, OSError) or not args or not isinstance(args[0], str):
        return str(exc) or type(exc).__name__  # OSError's own str() is "[Errno N] text"
    return args[0] or type(exc).__name__
