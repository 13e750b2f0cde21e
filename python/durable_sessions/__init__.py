"""Python client of the durable-sessions HTTP gateway.

>>> from durable_sessions import Client, MemoryRuntime
>>> with Client("http://127.0.0.1:7280", api_key) as sessions:
...     session = sessions.start("build-42", MemoryRuntime(initial_state="v1"))
...     ref = session.checkpoint(label="first")
...     session.pause(reason="nightly")
"""

from . import errors, inputs, models
from ._client import AsyncClient, AsyncSession, Client, Forks, Session
from .errors import *  # noqa: F403 - one class per error code
from .inputs import *  # noqa: F403 - what the client sends
from .models import *  # noqa: F403 - the answers' models

__all__ = ["AsyncClient", "AsyncSession", "Client", "Forks", "Session"]
__all__ += errors.__all__
__all__ += inputs.__all__
__all__ += models.__all__
