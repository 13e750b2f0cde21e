"""Python client of the durable-sessions HTTP gateway.

>>> from durable_sessions import Client
>>> with Client("http://127.0.0.1:7280", api_key) as sessions:
...     session = sessions.start("build-42", {"kind": "memory"})
...     ref = session.checkpoint(label="first")
...     session.pause(reason="nightly")
"""

from ._client import AsyncClient, AsyncSession, Client, Session
from .errors import *  # noqa: F401,F403 - one class per error code
from .errors import ERROR_CLASSES, DurableSessionsError, error_from_problem
from .models import *  # noqa: F401,F403 - the answers' models
from .models import __all__ as _models

__all__ = [
    "AsyncClient",
    "AsyncSession",
    "Client",
    "DurableSessionsError",
    "ERROR_CLASSES",
    "Session",
    "error_from_problem",
    *(cls.__name__ for cls in ERROR_CLASSES.values()),
    *_models,
]
