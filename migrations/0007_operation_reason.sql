-- netctl journal, version 7: why an operation that no runtime asked for was begun.
--
-- A DEL begun by netctl itself (origin reconcile, event, pod-deleted, gc, replay) and a
-- RELEASE by the reconciler carry their reason ("netns /run/netns/x is gone", "the pod
-- was deleted through the API", …), so `netctl journal` shows it in the history, not
-- only while the leak lasts. NULL for the runtime's own requests and older rows.

ALTER TABLE operations ADD COLUMN reason TEXT;
