"""Adapters that plug surfacelog into agent frameworks.

The top floor of the package: a module here may import any layer (schema, session,
store, actors), and nothing of the package imports it. Each adapter imports its
framework lazily or not at all, so ``import surfacelog`` never needs one installed.

- ``surfacelog.integrations.openai_agents``: the OpenAI Agents SDK ``Session`` protocol
  over the embedded store or a Ray ``SessionHandle``.
"""
