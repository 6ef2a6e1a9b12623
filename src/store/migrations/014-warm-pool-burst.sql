-- A pool grows for a burst (controller/warm-pools/plan.ts `burstSize`): up to max_size
-- members while the creates its members could have served in the demand window outnumber
-- its size; back to size as they age out. NULL = never beyond size.
ALTER TABLE warm_pools ADD COLUMN max_size integer CHECK (max_size >= 0);
-- The demand count (store/warm-pools.ts `recentCreates`): one template's creates in a
-- recent window, read by the reconciler of a pool that may grow.
CREATE INDEX sandboxes_template_created ON sandboxes (template_id, created_at);
