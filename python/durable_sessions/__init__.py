"""Python client of the durable-sessions HTTP gateway.

>>> from durable_sessions import Client
>>> with Client("http://127.0.0.1:7280", api_key) as sessions:
...     session = sessions.start("build-42", {"kind": "memory"})
...     ref = session.checkpoint(label="first")
...     session.pause(reason="nightly")
"""

from . import errors, models
from ._client import AsyncClient, AsyncSession, Client, Session
from .errors import *  # noqa: F403 - one class per error code
from .models import *  # noqa: F403 - the answers' models

__all__ = ["AsyncClient", "AsyncSession", "Client", "Session"]
__all__ += errors.__all__
__all__ += models.__all__
