-- netctl journal, version 8: sticky addresses (netctl/ipam/sticky.py).
--
-- A sticky allocation carries the identity that owns its address (sticky_key:
-- "pod:ns/name", "vm:ns/name", "key:…") and how long the address stays reserved for it
-- once released (sticky_for, seconds). Its release sets reserved_until; the reservation
-- ends when the identity takes the address back (reservation_end 'taken back', by the
-- new allocation's operation), when it expires ('expired', by a RELEASE operation of
-- origin 'sticky'), or when a newer reservation of the identity replaces it
-- ('replaced'). An open reservation counts as used; pruning keeps its row.

ALTER TABLE ipam_allocations ADD COLUMN sticky_key TEXT NOT NULL DEFAULT '';
ALTER TABLE ipam_allocations ADD COLUMN sticky_for REAL;
ALTER TABLE ipam_allocations ADD COLUMN reserved_until REAL;
ALTER TABLE ipam_allocations ADD COLUMN reservation_end TEXT;
ALTER TABLE ipam_allocations ADD COLUMN reservation_op INTEGER REFERENCES operations (id);
CREATE INDEX ipam_reserved ON ipam_allocations (scope, address)
    WHERE reserved_until IS NOT NULL AND reservation_end IS NULL;
CREATE INDEX ipam_reservation_op ON ipam_allocations (reservation_op);

-- the identity an attachment's sticky addresses belong to, found at its ADD from the
-- pod's annotations and labels (kept for what is plugged into the same sandbox later)
ALTER TABLE attachments ADD COLUMN sticky_key TEXT NOT NULL DEFAULT '';
