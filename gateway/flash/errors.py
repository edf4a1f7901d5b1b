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
