-- idempotency version 1: the records, one row per (scope, key) seen by a handler.
CREATE TABLE IF NOT EXISTS "choreo_idempotency" (
    scope        text        NOT NULL CHECK (octet_length(scope) BETWEEN 1 AND 255),
    key          text        NOT NULL CHECK (octet_length(key) BETWEEN 1 AND 255),
    request_hash bytea       NOT NULL,
    response     bytea,
    created_at   timestamptz NOT NULL DEFAULT now(),
    expires_at   timestamptz NOT NULL,
    PRIMARY KEY (scope, key)
);

-- The Sweeper walks expired rows in expires_at order.
CREATE INDEX IF NOT EXISTS "choreo_idempotency_expires_at_idx" ON "choreo_idempotency" (expires_at);
