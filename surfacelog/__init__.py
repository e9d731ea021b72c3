"""surfacelog: event-sourced agent session logs with a replaceable surface."""
