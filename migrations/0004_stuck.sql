-- netctl journal, version 4: attachments whose clean-up keeps failing.
--
-- A DEL (from a runtime, the replay or the reconciler) that cannot remove an
-- attachment counts a failure on it; the reconciler then leaves it alone until
-- retry_at (exponential back-off, capped), so a stuck attachment costs one
-- journaled DEL per back-off step instead of one per round.

ALTER TABLE attachments ADD COLUMN del_failures INTEGER NOT NULL DEFAULT 0;
ALTER TABLE attachments ADD COLUMN retry_at REAL;
