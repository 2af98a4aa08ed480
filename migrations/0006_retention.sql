-- netctl journal, version 6: indexes for pruning by age (journal-retention,
-- allocation-retention; netctl/journal/retention.py).
--
-- With foreign keys on, deleting an operation or an attachment looks up every row that
-- references it: these make each lookup an index probe instead of a scan of the table.
-- The released allocations and the ended blocks are found by age, oldest first.
-- (auto_vacuum=INCREMENTAL cannot be set in a migration: it needs a VACUUM, outside any
-- transaction; netctl/journal/migrate.py converts the file once, when it opens.)

CREATE INDEX attachments_add_op ON attachments (add_op);
CREATE INDEX attachments_del_op ON attachments (del_op);
CREATE INDEX ipam_allocated_op ON ipam_allocations (allocated_op);
CREATE INDEX ipam_released_op ON ipam_allocations (released_op);
CREATE INDEX ipam_released ON ipam_allocations (released_at) WHERE released_at IS NOT NULL;
CREATE INDEX ipam_blocks_ended ON ipam_blocks (until) WHERE until IS NOT NULL;
