"""Errors: every failed hcq call raises an `hcq.Error` subclass carrying the C status code and
message (include/hcq/status.h). The subclasses follow the closed set of codes; some also derive
from the built-in exception a Python user would catch (TimeoutError, MemoryError, ...)."""
from ._ffi import ffi, lib, text


class Error(Exception):
    """A failed hcq call: `code` is the status code's name ("INVALID_ARGUMENT"), `message` what the
    library said, naming the object at fault."""

    code = "UNKNOWN"

    def __init__(self, message, code=None):
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code

    def __str__(self):
        return "%s: %s" % (self.code, self.message)


class InvalidArgument(Error, ValueError):
    code = "INVALID_ARGUMENT"


class NotFound(Error, LookupError):
    code = "NOT_FOUND"


class OutOfRange(Error, ValueError):
    code = "OUT_OF_RANGE"


class OutOfMemory(Error, MemoryError):
    code = "OUT_OF_MEMORY"


class CompileError(Error):
    code = "COMPILE_ERROR"


class Timeout(Error, TimeoutError):
    code = "TIMEOUT"


class Unavailable(Error):
    code = "UNAVAILABLE"


class FailedPrecondition(Error):
    code = "FAILED_PRECONDITION"


class DeviceError(Error):
    code = "DEVICE_ERROR"


class DeviceLost(Error):
    code = "DEVICE_LOST"


class Unimplemented(Error, NotImplementedError):
    code = "UNIMPLEMENTED"


class Internal(Error):
    code = "INTERNAL"


_BY_CODE = {cls.code: cls for cls in (InvalidArgument, NotFound, OutOfRange, OutOfMemory, CompileError, Timeout,
                                      Unavailable, FailedPrecondition, DeviceError, DeviceLost, Unimplemented,
                                      Internal)}


def error_from_status(status):
    """Turns a failure status into an exception and releases the status."""
    code = text(lib.hcq_status_code_name(lib.hcq_status_code(status)))
    message = text(lib.hcq_status_message(status))
    lib.hcq_status_destroy(status)
    return _BY_CODE.get(code, Error)(message, code)


def check(status):
    """Raises the status's error; nothing for success (NULL)."""
    if status != ffi.NULL:
        raise error_from_status(status)


def closed_error(what):
    """The error of a Python object used after close(): the C handle is gone, so no call is made."""
    return FailedPrecondition("%s was closed" % what)


class Closeable:
    """An object whose close() releases what it holds: also at the end of a `with` block and when
    it is collected (a finalizer never raises; call close() to see its errors)."""

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:  # noqa: BLE001 - a finalizer must not raise; close() reports errors
            pass
