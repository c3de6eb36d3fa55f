-- lock_fences version 1: fencing tokens, the highest lock token that wrote for each entity.
-- lock.CheckFence upserts into it inside the caller's transaction.
CREATE TABLE IF NOT EXISTS "choreo_lock_fences" (
    entity     text        PRIMARY KEY,
    token      bigint      NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now()
);

-- lock.PruneFences deletes rows not written for a long time.
CREATE INDEX IF NOT EXISTS "choreo_lock_fences_updated_at_idx" ON "choreo_lock_fences" (updated_at);
