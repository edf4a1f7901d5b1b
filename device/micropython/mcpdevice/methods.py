# A device's own JSON-RPC methods (Dispatcher's `methods`): checked once, served on request.
#
# A module of its own so that a device without methods (pump-1) never loads this code: compiling a
# module from source on the board needs several times its size, and the 96 KB heap has no room to
# spare. See mcpdevice/dispatcher.py for the API.

BUILT_IN = ("initialize", "ping", "tools/list", "tools/call")
INTERNAL_ERROR = -32603
METHOD_NOT_FOUND = -32601


def check(methods):
    for name in BUILT_IN:
        if name in methods:
            raise ValueError("methods cannot replace the built-in " + name)


def serve(dispatcher, request_id, method, params):
    """The answer to a request none of the built-in methods took: the device's own method, or -32601."""
    handler = dispatcher.methods.get(method)
    if handler is None:
        known = BUILT_IN + tuple(sorted(dispatcher.methods))
        return dispatcher._error(
            request_id,
            METHOD_NOT_FOUND,
            "Method not found: %s. This device answers %s and %s" % (method, ", ".join(known[:-1]), known[-1]),
        )
    try:
        return dispatcher._result(request_id, handler(params))
    except Exception as exc:  # ValueError(code, message): the handler's refusal; else a bug in it
        error = exc.args
        if type(exc) is not ValueError or len(error) != 2 or type(error[0]) is not int:
            error = INTERNAL_ERROR, "%s failed inside the device: %r" % (method, exc)
        return dispatcher._error(request_id, error[0], error[1])
