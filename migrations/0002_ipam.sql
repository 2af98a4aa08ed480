-- netctl journal, version 2: the central IPAM's pools and allocations (sqlite backend).
--
-- An allocation is never deleted: releasing it sets released_at, so the table
-- answers "who held this address at that time" for as long as the journal lives.
-- Uniqueness holds per scope among live allocations: the pool itself, or, with
-- enable_overlapping_ranges, every pool of the same network_name.

CREATE TABLE ipam_pools (
    key             TEXT    PRIMARY KEY,   -- "<range key>" or "<network_name>/<range key>"
    network_name    TEXT    NOT NULL DEFAULT '',
    range           TEXT    NOT NULL,
    family          INTEGER NOT NULL,      -- 4 or 6
    size            TEXT    NOT NULL,      -- assignable addresses, decimal (may pass 2**63)
    cursor          TEXT,                  -- last address handed out, decimal, for round-robin
    created_at      REAL    NOT NULL
);

CREATE TABLE ipam_allocations (
    id              INTEGER PRIMARY KEY,
    pool            TEXT    NOT NULL REFERENCES ipam_pools (key),
    scope           TEXT    NOT NULL,
    address         TEXT    NOT NULL,      -- the address alone, canonical text
    prefix          INTEGER NOT NULL,
    container_id    TEXT    NOT NULL,
    ifname          TEXT    NOT NULL,
    netns           TEXT    NOT NULL DEFAULT '',
    pod_namespace   TEXT    NOT NULL DEFAULT '',
    pod_name        TEXT    NOT NULL DEFAULT '',
    pod_uid         TEXT    NOT NULL DEFAULT '',
    attachment_id   INTEGER REFERENCES attachments (id),  -- NULL when served as a plain IPAM plugin
    allocated_op    INTEGER REFERENCES operations (id),
    released_op     INTEGER REFERENCES operations (id),
    allocated_at    REAL    NOT NULL,
    released_at     REAL
);
CREATE UNIQUE INDEX ipam_live_address ON ipam_allocations (scope, address)
    WHERE released_at IS NULL;
CREATE INDEX ipam_live_owner ON ipam_allocations (container_id, ifname)
    WHERE released_at IS NULL;
CREATE INDEX ipam_attachment ON ipam_allocations (attachment_id);
CREATE INDEX ipam_address ON ipam_allocations (address);
CREATE INDEX ipam_pool ON ipam_allocations (pool);
