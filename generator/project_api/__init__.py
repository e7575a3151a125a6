"""The Project API: microTVM's protocol between a tool and a project's server.

`ProjectClient` starts a template's or a project's `microtvm_api_server.py` and calls it;
`generator.project_api.handler` is our server; `protocol` is the wire format (v1).
"""

from generator.project_api.client import (
    ProjectAPIError,
    ProjectClient,
    ProjectTransport,
    TransportClosed,
    TransportTimeout,
)

__all__ = ["ProjectAPIError", "ProjectClient", "ProjectTransport", "TransportClosed",
           "TransportTimeout"]
