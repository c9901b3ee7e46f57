"""The base of the exception hierarchy. It lives in `core`, below every app, so that every app can subclass it."""


class PortalError(Exception):
    """Base of every domain error; the API maps subclasses to 4xx answers (core.api.exceptions)."""


class StateConflictError(PortalError):
    """The object is not in a state that allows the operation (the API answers 409, not 400)."""
