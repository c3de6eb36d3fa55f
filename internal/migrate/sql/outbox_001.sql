-- outbox version 1: the outbox table and its dead-letter table.

-- Rows waiting to be published. The relay reads them in id order and deletes
-- each row only after the broker acknowledged it.
CREATE TABLE IF NOT EXISTS "choreo_outbox" (
    id         bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    topic      text        NOT NULL,
    key        text        NOT NULL,
    headers    jsonb       NOT NULL DEFAULT '[]',  -- [["ce_id","..."],["traceparent","..."],...]
    payload    bytea       NOT NULL,
    created_at timestamptz NOT NULL DEFAULT clock_timestamp()
);

-- Rows the broker rejected permanently (e.g. MESSAGE_TOO_LARGE), with the reason.
-- They are never retried automatically; an operator may move them back into
-- the outbox table (INSERT ... SELECT topic, key, headers, payload ...).
CREATE TABLE IF NOT EXISTS "choreo_outbox_dead" (
    id         bigint      PRIMARY KEY,
    topic      text        NOT NULL,
    key        text        NOT NULL,
    headers    jsonb       NOT NULL,
    payload    bytea       NOT NULL,
    created_at timestamptz NOT NULL,
    failed_at  timestamptz NOT NULL DEFAULT clock_timestamp(),
    reason     text        NOT NULL
);
