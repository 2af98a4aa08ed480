-- netctl journal, version 5: address blocks of the cluster-wide IPAM
-- (ipam-backend: kubernetes).
--
-- Every block this node claims, from the intent (state 'claiming', written before
-- the API request) to its end: 'held' once the API server created it for this node,
-- then 'released' (this node gave it back), 'lost' (the API says it is not this
-- node's: a claim that did not happen, or a block another node took over) or
-- 'taken' (the claim found it was another's). Blocks of other nodes are recorded
-- as they are seen ('seen', until they go or change owner), so that any node can
-- tell which node held an address at a given time.

CREATE TABLE ipam_blocks (
    id      INTEGER PRIMARY KEY,
    name    TEXT    NOT NULL,
    pool    TEXT    NOT NULL,
    scope   TEXT    NOT NULL,
    cidr    TEXT    NOT NULL,
    node    TEXT    NOT NULL,
    state   TEXT    NOT NULL,   -- claiming | held | released | lost | taken | seen
    since   REAL    NOT NULL,
    until   REAL
);
CREATE INDEX ipam_blocks_open ON ipam_blocks(name) WHERE until IS NULL;
