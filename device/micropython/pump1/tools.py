"""The five pump-1 tools as MCP tool handlers over a PumpController (shared with the simulator).

API: handlers(controller) -> {"get_status": fn, "start": fn, "set_speed": fn, "stop": fn,
     "reset_fault": fn}; each fn(arguments: dict) returns an MCP CallToolResult dict: the status
     object as structuredContent and JSON text, or an isError result whose text says what to do.
Arguments are checked here the way the input schemas say (names, required), values by the
controller, so the device enforces its own limits even when the gateway already did.
"""

from mcpdevice import results

_NO_ARGS = ()
_SPEED = ("speed_rpm",)


def _unexpected(arguments, allowed):
    for key in arguments:
        if key not in allowed:
            if allowed:
                return "Unknown argument %s: this tool takes only %s." % (key, ", ".join(allowed))
            return "Unknown argument %s: this tool takes no arguments." % key
    return None


def handlers(controller):
    def answer(refusal):
        if refusal is not None:
            return results.error(refusal)
        return results.ok(controller.status())

    def get_status(arguments):
        refusal = _unexpected(arguments, _NO_ARGS)
        if refusal is None:
            controller.get_status()
        return answer(refusal)

    def start(arguments):
        refusal = _unexpected(arguments, _SPEED)
        speed = arguments.get("speed_rpm")
        if refusal is None and speed is None and "speed_rpm" in arguments:
            refusal = controller.check_speed(speed)  # an explicit null is not "use the setpoint"
        if refusal is None:
            refusal = controller.start(speed)
        return answer(refusal)

    def set_speed(arguments):
        refusal = _unexpected(arguments, _SPEED)
        if refusal is None:
            if "speed_rpm" not in arguments:
                refusal = "set_speed needs speed_rpm, the new speed in rpm (300 to 2900)."
            else:
                refusal = controller.set_speed(arguments["speed_rpm"])
        return answer(refusal)

    def stop(arguments):
        refusal = _unexpected(arguments, _NO_ARGS)
        if refusal is None:
            controller.stop()
        return answer(refusal)

    def reset_fault(arguments):
        refusal = _unexpected(arguments, _NO_ARGS)
        if refusal is None:
            refusal = controller.reset_fault()
        return answer(refusal)

    return {
        "get_status": get_status,
        "start": start,
        "set_speed": set_speed,
        "stop": stop,
        "reset_fault": reset_fault,
    }
