"""The HTTP gateway: a Ray Serve application (FastAPI ingress) over the session actors.

Modules by responsibility: ``ids`` (session id rules), ``auth`` (bearer tokens and
their session-id prefixes), ``problems`` (typed errors -> HTTP problem documents),
``wire`` (request and response bodies), ``app`` (the routes), ``deployment`` (the Serve
deployment and starting it), ``openapi`` (the checked-in OpenAPI document).

Only ``deployment`` imports Ray Serve; the rest imports FastAPI and the layers below.
"""
