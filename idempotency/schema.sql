-- choreo idempotency records: one row per (scope, key) seen by a handler.
-- {{.Table}} and {{.Index}} are replaced with quoted identifiers; the
-- default rendering is exported as idempotency.Schema.
CREATE TABLE IF NOT EXISTS {{.Table}} (
    scope        text        NOT NULL CHECK (octet_length(scope) BETWEEN 1 AND 255),
    key          text        NOT NULL CHECK (octet_length(key) BETWEEN 1 AND 255),
    request_hash bytea       NOT NULL,
    response     bytea,
    created_at   timestamptz NOT NULL DEFAULT now(),
    expires_at   timestamptz NOT NULL,
    PRIMARY KEY (scope, key)
);

-- The Sweeper walks expired rows in expires_at order.
CREATE INDEX IF NOT EXISTS {{.Index}} ON {{.Table}} (expires_at);
