-- A node's count when it was found past its memory target (docs/capacity.md "A full node
-- keeps its count"): written by the heartbeat that first finds it past the target (the
-- sandboxes holding a slot there then), kept while it stays past, NULL once it is back
-- under. While it is set, the node takes a sandbox in place of each that ended, up to it.
ALTER TABLE nodes ADD COLUMN memory_full_slots integer CHECK (memory_full_slots >= 0);
