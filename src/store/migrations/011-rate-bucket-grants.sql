-- A take may ask for several tokens at once (an API replica leasing a batch, api/rate-limit.ts)
-- and give unused ones back: how many the last take granted.
ALTER TABLE rate_buckets ADD COLUMN granted double precision NOT NULL DEFAULT 0;
