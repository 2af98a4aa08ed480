-- netctl journal, version 1: operations, the attachments they make, and every delegate step.
--
-- An operation is one request (ADD, DEL, CHECK, GC) from a runtime or from the
-- reconciler. An attachment is one network of one container: the exact chain
-- it runs, the latest result of that chain, and how many steps of it started,
-- which is all a DEL needs on a later day. A step is one plugin exec.
-- Times are UNIX seconds (REAL).

CREATE TABLE operations (
    id              INTEGER PRIMARY KEY,
    verb            TEXT    NOT NULL,
    container_id    TEXT    NOT NULL,
    netns           TEXT    NOT NULL DEFAULT '',
    ifname          TEXT    NOT NULL DEFAULT '',
    caller_network  TEXT    NOT NULL DEFAULT '',
    caller_version  TEXT    NOT NULL DEFAULT '',
    pod_namespace   TEXT    NOT NULL DEFAULT '',
    pod_name        TEXT    NOT NULL DEFAULT '',
    pod_uid         TEXT    NOT NULL DEFAULT '',
    request         BLOB,
    origin          TEXT    NOT NULL DEFAULT 'runtime',   -- runtime | replay | gc
    state           TEXT    NOT NULL,   -- running | done | failed | compensated | compensate_failed | abandoned
    code            INTEGER,
    error           TEXT,
    started_at      REAL    NOT NULL,
    finished_at     REAL
);
CREATE INDEX operations_container ON operations (container_id);
CREATE INDEX operations_state ON operations (state) WHERE state = 'running';
CREATE INDEX operations_pod ON operations (pod_namespace, pod_name);
CREATE INDEX operations_started ON operations (started_at);

CREATE TABLE attachments (
    id              INTEGER PRIMARY KEY,
    container_id    TEXT    NOT NULL,
    ifname          TEXT    NOT NULL,
    network         TEXT    NOT NULL,   -- the network's key: ns/name of its NAD, or a file path
    network_name    TEXT    NOT NULL,   -- the chain's CNI "name"
    is_default      INTEGER NOT NULL DEFAULT 0,
    caller_network  TEXT    NOT NULL DEFAULT '',
    caller_ifname   TEXT    NOT NULL DEFAULT '',
    netns           TEXT    NOT NULL DEFAULT '',
    pod_namespace   TEXT    NOT NULL DEFAULT '',
    pod_name        TEXT    NOT NULL DEFAULT '',
    pod_uid         TEXT    NOT NULL DEFAULT '',
    cni_version     TEXT    NOT NULL,
    chain           BLOB    NOT NULL,   -- exact conf/conflist bytes
    capability_args BLOB    NOT NULL,   -- JSON: runtimeConfig values offered to the chain
    cni_args        BLOB    NOT NULL,   -- JSON: args.cni merged into each plugin conf
    steps_started   INTEGER NOT NULL DEFAULT 0,
    result          BLOB,               -- latest result of the chain (final once attached)
    state           TEXT    NOT NULL,   -- adding | attached | removing | removed
    add_op          INTEGER REFERENCES operations (id),
    del_op          INTEGER REFERENCES operations (id),
    error           TEXT,
    created_at      REAL    NOT NULL,
    removed_at      REAL
);
CREATE INDEX attachments_container ON attachments (container_id);
CREATE INDEX attachments_live ON attachments (state) WHERE state != 'removed';
CREATE INDEX attachments_pod ON attachments (pod_namespace, pod_name);

CREATE TABLE steps (
    id              INTEGER PRIMARY KEY,
    operation_id    INTEGER NOT NULL REFERENCES operations (id),
    attachment_id   INTEGER NOT NULL REFERENCES attachments (id),
    position        INTEGER NOT NULL,
    verb            TEXT    NOT NULL,
    plugin_type     TEXT    NOT NULL,
    config          BLOB    NOT NULL,   -- exact stdin sent to the plugin
    netns           TEXT    NOT NULL,
    ifname          TEXT    NOT NULL,
    state           TEXT    NOT NULL,   -- running | ok | failed
    result          BLOB,
    code            INTEGER,
    error           TEXT,
    stderr          BLOB,
    started_at      REAL    NOT NULL,
    finished_at     REAL,
    seconds         REAL
);
CREATE INDEX steps_operation ON steps (operation_id);
CREATE INDEX steps_attachment ON steps (attachment_id);
