"""Persistence: the EventStore interface and its aiosqlite implementation."""
