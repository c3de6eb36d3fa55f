-- payment service schema (idempotent; applied at every start under an advisory lock).

-- Customers: balance is the money the customer still has; charge_limit caps one charge.
-- initial_balance is the seeded balance, for the conservation audit:
--   sum(balance) + sum(captured) = sum(initial_balance).
CREATE TABLE IF NOT EXISTS payment_customers (
    id              text PRIMARY KEY,
    balance         bigint NOT NULL CHECK (balance >= 0),
    charge_limit    bigint NOT NULL CHECK (charge_limit >= 0),
    initial_balance bigint NOT NULL CHECK (initial_balance >= 0)
);

-- One row per order, ever: the primary key is the "never charge twice" guard.
-- status: held (hang knob, never answered), authorized (charged), declined (nothing
-- charged), refunded (charged then refunded), cancelled (tombstone: cancel seen before
-- any charge; a later order.created charges nothing).
CREATE TABLE IF NOT EXISTS payment_orders (
    order_id        text PRIMARY KEY,
    customer_id     text NOT NULL,
    amount          bigint NOT NULL,
    status          text NOT NULL CHECK (status IN ('held', 'authorized', 'declined', 'refunded', 'cancelled')),
    charged_amount  bigint NOT NULL DEFAULT 0 CHECK (charged_amount >= 0),
    refunded_amount bigint NOT NULL DEFAULT 0 CHECK (refunded_amount >= 0),
    reason          text NOT NULL DEFAULT '',
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now(),
    CHECK (refunded_amount <= charged_amount)
);

-- The money movements. At most one charge and one refund per order, enforced by the
-- database whatever the handlers do.
CREATE TABLE IF NOT EXISTS payment_ledger (
    order_id    text NOT NULL,
    kind        text NOT NULL CHECK (kind IN ('charge', 'refund')),
    customer_id text NOT NULL,
    amount      bigint NOT NULL CHECK (amount > 0),
    event_id    text NOT NULL,
    at          timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (order_id, kind)
);

-- The outcomes the order service announced on orders.events (order.confirmed,
-- order.rejected, order.cancelled). An order that ended REJECTED or CANCELLED needs no
-- charge: OrderCreated charges nothing for it, and the reconciliation refunds a charge
-- that is still there (checked marks the rows it has looked at).
CREATE TABLE IF NOT EXISTS payment_order_outcomes (
    order_id       text PRIMARY KEY,
    outcome        text NOT NULL CHECK (outcome IN ('CONFIRMED', 'REJECTED', 'CANCELLED')),
    reason         text NOT NULL DEFAULT '',
    event_id       text NOT NULL,
    correlation_id text NOT NULL DEFAULT '',
    checked        boolean NOT NULL DEFAULT false,
    at             timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS payment_order_outcomes_unchecked
    ON payment_order_outcomes (at) WHERE NOT checked;

-- Applies a transaction's balance changes (balance.go, applyBalances): locks the
-- customers' rows in id order, adds each change, and fails with a serialization failure
-- (SQLSTATE 40001, retried by the consumer) unless every customer exists and keeps
-- balance >= 0. One statement, so that it can go out in the COMMIT's round trip: the
-- rows stay locked for that statement and the commit only.
CREATE OR REPLACE FUNCTION payment_apply_balances(ids text[], deltas bigint[])
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    changed bigint;
BEGIN
    PERFORM 1 FROM payment_customers WHERE id = ANY (ids) ORDER BY id FOR UPDATE;
    UPDATE payment_customers c SET balance = c.balance + r.d
    FROM unnest(ids, deltas) AS r (id, d)
    WHERE c.id = r.id AND c.balance + r.d >= 0;
    GET DIAGNOSTICS changed = ROW_COUNT;
    IF changed <> cardinality(ids) THEN
        RAISE EXCEPTION USING ERRCODE = 'serialization_failure',
            MESSAGE = format('balance changed since it was read: %s of %s customers had the balance this transaction decided on',
                changed, cardinality(ids));
    END IF;
END $$;
