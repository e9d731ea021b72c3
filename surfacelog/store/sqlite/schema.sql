-- The surfacelog SQLite schema (docs/rules.md §12).
--
-- surfacelog.store.schema_check sets PRAGMA application_id and PRAGMA user_version
-- (SCHEMA_VERSION) when it creates a database, and refuses any file whose pragmas or
-- table definitions differ from this file (bump-and-reject, no migration). Bump
-- SCHEMA_VERSION with every change here.

-- One row per session: its header (JSON text of the SessionHeader), the writer epoch
-- that fences stale writers, and the next seq an append must start at.
CREATE TABLE sessions (
    id           TEXT    NOT NULL PRIMARY KEY,
    header       TEXT    NOT NULL,
    created_at   INTEGER NOT NULL,
    writer_epoch INTEGER NOT NULL CHECK (writer_epoch >= 1),
    next_seq     INTEGER NOT NULL CHECK (next_seq >= 0),
    last_time    INTEGER
) STRICT, WITHOUT ROWID;

-- One row per event. data, source_event_seqs and surface_op hold JSON text; NULL means
-- the key is absent (a JSON null is the text 'null', an empty list the text '[]').
-- ignorable is 1 for "ignorable": true, NULL when absent.
CREATE TABLE events (
    session_id        TEXT    NOT NULL,
    seq               INTEGER NOT NULL CHECK (seq >= 0),
    type              TEXT    NOT NULL,
    time              INTEGER NOT NULL,
    data              TEXT,
    source_event_seqs TEXT,
    surface_op        TEXT,
    ignorable         INTEGER CHECK (ignorable = 1),
    PRIMARY KEY (session_id, seq)
) STRICT, WITHOUT ROWID;

-- Schema version 2 added the three tables below. As for every version change (docs/rules.md §12:
-- bump-and-reject), a file of version 1 is refused and left untouched: export its
-- sessions with the build that wrote it and import them here.

-- The app and user a session belongs to (Google ADK's scoping), once per session.
CREATE TABLE scopes (
    session_id  TEXT    NOT NULL PRIMARY KEY,
    app_name    TEXT    NOT NULL,
    user_id     TEXT    NOT NULL,
    update_time INTEGER NOT NULL
) STRICT, WITHOUT ROWID;

CREATE INDEX scopes_by_owner ON scopes (app_name, user_id, session_id);

-- Key/value state: scope 'app' (app-wide: user_id and session_id are ''), 'user'
-- (per user of an app: session_id is ''), 'session'. value is JSON text.
CREATE TABLE state (
    scope      TEXT NOT NULL CHECK (scope IN ('app', 'user', 'session')),
    app_name   TEXT NOT NULL,
    user_id    TEXT NOT NULL,
    session_id TEXT NOT NULL,
    key        TEXT NOT NULL,
    value      TEXT NOT NULL,
    PRIMARY KEY (scope, app_name, user_id, session_id, key)
) STRICT, WITHOUT ROWID;

-- A deleted session: hidden from loading and listing, its rows kept until a purge.
CREATE TABLE tombstones (
    session_id TEXT    NOT NULL PRIMARY KEY,
    deleted_at INTEGER NOT NULL
) STRICT, WITHOUT ROWID;

-- Schema version 3 added the table below.

-- Where an imported session came from (store.provenance): the source as given, the
-- number of events it held and the RowDigest of the rows stored for them, written in
-- the import's own transaction, so that verify tells a session holding its whole
-- source from one cut short.
CREATE TABLE imports (
    session_id  TEXT    NOT NULL PRIMARY KEY,
    source      TEXT    NOT NULL,
    events      INTEGER NOT NULL CHECK (events >= 0),
    digest      TEXT    NOT NULL,
    imported_at INTEGER NOT NULL
) STRICT, WITHOUT ROWID;
