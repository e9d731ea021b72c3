"""The HTTP gateway: a FastAPI app over the session actors, served by replicas that are
plain Ray actors running uvicorn.

Modules by responsibility: ``ids`` (session id rules), ``auth`` (bearer tokens and
their session-id prefixes), ``problems`` (typed errors -> HTTP problem documents),
``wire`` (request and response bodies), ``app`` (the routes), ``budget`` (the request
bodies a replica holds at once), ``ingress`` (a replica: uvicorn serving the app from a
Ray actor), ``deployment`` (starting and stopping the replicas), ``openapi`` (the
checked-in OpenAPI document), ``httpclient`` (the load run's HTTP drivers).
"""
