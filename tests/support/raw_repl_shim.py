"""A board's console for the tests: MicroPython's raw REPL, run INSIDE the MicroPython Unix port.

The Unix port has no raw REPL of its own. This script is the console of a test "board": its stdin and
stdout are the master side of a PTY (the computer opens the slave, as it opens /dev/ttyUSB0), its
filesystem root is the folder given as its argument. It speaks what a board's console speaks to
mpremote and to gateway/provision/raw_repl.py:

- friendly REPL: Ctrl-A enters the raw REPL; Ctrl-D soft-resets (the board then runs main.py, when
  there is one); Ctrl-C answers a new prompt.
- raw REPL: "raw REPL; CTRL-B to exit\\r\\n>", code up to Ctrl-D, then "OK", its output, \\x04, its
  error, \\x04, ">"; Ctrl-D with no code soft-resets ("soft reboot"); Ctrl-B back to friendly.
- running main.py: Ctrl-C interrupts it (KeyboardInterrupt, then the friendly REPL).

Code runs with exec() in one namespace per boot (reset by a soft reset), with print() captured. The
application itself runs as a separate `micropython main.py` process in the same folder: this script
tells the test on stderr when the board resets ("event reset") and when the running program is
interrupted ("event interrupt"), and the test starts or stops that process (tests/field/board.py).
"""

import io
import os
import sys

RAW_BANNER = b"raw REPL; CTRL-B to exit\r\n>"
RUNNING = 0
FRIENDLY = 1
RAW = 2


def main():
    os.chdir(sys.argv[1])
    console_in = sys.stdin.buffer
    console_out = sys.stdout.buffer
    state = FRIENDLY
    code = bytearray()
    namespace = {"__name__": "__main__", "print": print}

    def send(data):
        console_out.write(data)

    def event(name):
        sys.stderr.write("event " + name + "\n")

    def run(source):
        captured = io.StringIO()

        def captured_print(*args, sep=" ", end="\n"):
            captured.write(sep.join(str(arg) for arg in args) + end)

        namespace["print"] = captured_print
        error = ""
        try:
            exec(source, namespace)
        except BaseException as exc:  # a board's raw REPL reports every exception
            text = io.StringIO()
            sys.print_exception(exc, text)  # type: ignore[attr-defined]  # MicroPython's own
            error = text.getvalue()
        return captured.getvalue(), error

    def has_main():
        try:
            os.stat("main.py")
            return True
        except OSError:
            return False

    event("ready")
    while True:
        byte = console_in.read(1)
        if not byte:
            return
        value = byte[0]
        if state == RAW:
            if value == 0x04 and not code:
                namespace = {"__name__": "__main__"}
                send(b"soft reboot\r\n" + RAW_BANNER)
            elif value == 0x04:
                send(b"OK")
                output, error = run(bytes(code).decode())
                send(output.encode() + b"\x04" + error.encode() + b"\x04>")
                code = bytearray()
            elif value == 0x01:
                code = bytearray()
                send(b"\r\n" + RAW_BANNER)
            elif value == 0x02:
                state = FRIENDLY
                send(b"\r\nMicroPython (raw REPL shim)\r\n>>> ")
            elif value == 0x03:
                code = bytearray()
            else:
                code.append(value)
        elif state == FRIENDLY:
            if value == 0x01:
                state = RAW
                code = bytearray()
                send(b"\r\n" + RAW_BANNER)
            elif value == 0x03:
                send(b"\r\n>>> ")
            elif value == 0x04:
                namespace = {"__name__": "__main__"}
                send(b"MPY: soft reboot\r\n")
                if has_main():
                    state = RUNNING
                    event("reset")
                else:
                    send(b">>> ")
        elif value == 0x03:  # RUNNING
            state = FRIENDLY
            event("interrupt")
            send(b"Traceback (most recent call last):\r\nKeyboardInterrupt: \r\n>>> ")


main()
