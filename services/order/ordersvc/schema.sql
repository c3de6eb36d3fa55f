-- order service schema. Safe to run any number of times (app.MigrateSQL serialises
-- concurrent runs with an advisory lock).

CREATE TABLE IF NOT EXISTS orders (
    id                 uuid        PRIMARY KEY,
    customer_id        text        NOT NULL,
    items              jsonb       NOT NULL,
    amount             bigint      NOT NULL CHECK (amount > 0),
    state              text        NOT NULL CHECK (state IN
                           ('PENDING','CONFIRMED','REJECTED','CANCELLING','CANCELLED','COMPENSATION_FAILED')),
    reason             text        NOT NULL DEFAULT '',
    -- Facts reported by payment and inventory (see ordersvc.Facts).
    payment_authorized boolean     NOT NULL DEFAULT false,
    payment_declined   boolean     NOT NULL DEFAULT false,
    payment_refunded   boolean     NOT NULL DEFAULT false,
    stock_reserved     boolean     NOT NULL DEFAULT false,
    stock_unavailable  boolean     NOT NULL DEFAULT false,
    stock_released     boolean     NOT NULL DEFAULT false,
    -- When the order entered its current state (stuck detection).
    state_since        timestamptz NOT NULL DEFAULT now(),
    -- The durable deadline of the current state: the saga deadline while PENDING, the
    -- compensation deadline while CANCELLING, NULL in terminal states.
    deadline_at        timestamptz,
    -- The span that created the order: the saga's trace, continued by later commands.
    trace_id           text        NOT NULL DEFAULT '',
    span_id            text        NOT NULL DEFAULT '',
    created_at         timestamptz NOT NULL DEFAULT now(),
    updated_at         timestamptz NOT NULL DEFAULT now(),
    version            bigint      NOT NULL DEFAULT 1
);

-- The deadline sweeper and the stuck gauge read only non-terminal orders.
-- How many times the order has sent order.cancel_requested (the first send and every
-- re-send, automatic or by hand); the compensation deadline re-sends while fewer than
-- 1 + ORDER_COMPENSATION_RETRIES were sent. Added after the first release.
ALTER TABLE orders ADD COLUMN IF NOT EXISTS compensation_attempts integer NOT NULL DEFAULT 0;
-- Orders cancelled before the count existed have sent their cancellation once.
UPDATE orders SET compensation_attempts = 1
    WHERE compensation_attempts = 0 AND state IN ('CANCELLING', 'COMPENSATION_FAILED');

-- The sampled flag of the creating span (trace_id, span_id): later commands continue
-- the saga's trace with its sampling decision. Added after the first release; orders
-- created before were sampled (the services recorded every span then).
ALTER TABLE orders ADD COLUMN IF NOT EXISTS trace_sampled boolean NOT NULL DEFAULT true;

-- Room on each page for an order's first update: the facts of a PENDING order
-- (payment.authorized or stock.reserved, the order staying PENDING) change no indexed
-- column, so that update can be HOT (no new entry in the five indexes below, less WAL)
-- when the row's page has room for the new version; at the default fillfactor 100 the
-- page of a new order is usually full by then. Applies to pages written from now on.
ALTER TABLE orders SET (fillfactor = 80);

CREATE INDEX IF NOT EXISTS orders_deadline_idx ON orders (deadline_at)
    WHERE state IN ('PENDING', 'CANCELLING');
CREATE INDEX IF NOT EXISTS orders_open_since_idx ON orders (state, state_since)
    WHERE state IN ('PENDING', 'CANCELLING');
CREATE INDEX IF NOT EXISTS orders_state_created_idx ON orders (state, created_at);
CREATE INDEX IF NOT EXISTS orders_created_idx ON orders (created_at);

-- Every trigger an order saw, in order: applied transitions (from -> to, possibly
-- from = to when only facts changed) and ignored ones (invalid for the state).
CREATE TABLE IF NOT EXISTS order_history (
    id               bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    order_id         uuid        NOT NULL REFERENCES orders (id),
    from_state       text        NOT NULL DEFAULT '',   -- '' for the creation
    to_state         text        NOT NULL,
    cause_event_id   text        NOT NULL DEFAULT '',   -- '' for commands
    cause_event_type text        NOT NULL,              -- event type or command name
    ignored          boolean     NOT NULL DEFAULT false,
    note             text        NOT NULL DEFAULT '',
    at               timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX IF NOT EXISTS order_history_order_idx ON order_history (order_id, id);
