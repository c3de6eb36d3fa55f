-- inventory service schema (idempotent; applied at every start under an advisory lock).

-- Stock per SKU. available is stock not spread over the SKU's shards yet (seeded, or left
-- by an older version); the service spreads it at every start. Conservation, per SKU:
--   initial_qty = available + Σ inventory_stock_shards.available
--                 + Σ qty of reservations in status reserved or committed.
CREATE TABLE IF NOT EXISTS inventory_stock (
    sku         text PRIMARY KEY,
    initial_qty bigint NOT NULL CHECK (initial_qty >= 0),
    available   bigint NOT NULL CHECK (available >= 0)
);

-- One row per order, ever. status:
--   reserved    stock held until expires_at (or order.confirmed / cancel)
--   committed   the order was confirmed: the stock is sold
--   released    released by a cancel
--   expired     released by the sweeper after the TTL
--   unavailable nothing reserved (not enough stock, unknown SKU, or the order was cancelled first)
--   cancelled   tombstone: cancel seen before payment.authorized; a later one reserves nothing
-- cancel_seen makes the answer to a cancel (one stock.released) happen once per order.
CREATE TABLE IF NOT EXISTS inventory_reservations (
    order_id    text PRIMARY KEY,
    status      text NOT NULL CHECK (status IN ('reserved', 'committed', 'released', 'expired', 'unavailable', 'cancelled')),
    cancel_seen boolean NOT NULL DEFAULT false,
    reason      text NOT NULL DEFAULT '',
    expires_at  timestamptz,
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now()
);

-- Indexes are created only when missing, checked by name first: CREATE INDEX IF NOT
-- EXISTS locks its table (SHARE) before it looks, and at a restart next to a running
-- instance, locking inventory_reservations then inventory_orders that way deadlocked with
-- handlers that write inventory_orders then inventory_reservations.
DO $$ BEGIN
    IF to_regclass('inventory_reservations_expiry') IS NULL THEN
        CREATE INDEX inventory_reservations_expiry
            ON inventory_reservations (expires_at) WHERE status = 'reserved';
    END IF;
END $$;

-- The items a reservation holds (or held), one row per SKU.
CREATE TABLE IF NOT EXISTS inventory_reservation_items (
    order_id text NOT NULL REFERENCES inventory_reservations (order_id),
    sku      text NOT NULL REFERENCES inventory_stock (sku),
    qty      bigint NOT NULL CHECK (qty > 0),
    PRIMARY KEY (order_id, sku)
);

-- What inventory knows of each order from the order service (orders.events), and the
-- payment.authorized it holds back until then. Inventory takes stock only for orders the
-- order service announced (order.created): a payment.authorized for an order not
-- announced yet is held here (held_*) and reserved when order.created arrives; one held
-- longer than INVENTORY_ORPHAN_AFTER is reported once as an orphan (orphan_reported) and
-- never reserved unless the order is announced. outcome is the order's final state as
-- announced (order.confirmed / order.rejected / order.cancelled); checked is false
-- until the reconciliation has made sure a REJECTED or CANCELLED order holds no
-- reservation.
CREATE TABLE IF NOT EXISTS inventory_orders (
    order_id               text PRIMARY KEY,
    announced              boolean NOT NULL DEFAULT false,
    outcome                text CHECK (outcome IN ('CONFIRMED', 'REJECTED', 'CANCELLED')),
    outcome_event_id       text NOT NULL DEFAULT '',
    outcome_correlation_id text NOT NULL DEFAULT '',
    checked                boolean NOT NULL DEFAULT true,
    held_event_id          text,
    held_correlation_id    text,
    held_data              jsonb,
    held_at                timestamptz,
    orphan_reported        boolean NOT NULL DEFAULT false,
    created_at             timestamptz NOT NULL DEFAULT now(),
    updated_at             timestamptz NOT NULL DEFAULT now()
);
-- The order as the order service announced it (order.created): inventory reserves for a
-- payment.authorized only when its items (merged by SKU), customer and amount are these;
-- any other is dead-lettered as a mismatch and reserves nothing. NULL for an order not
-- announced yet, or announced before these columns existed (not checked).
ALTER TABLE inventory_orders ADD COLUMN IF NOT EXISTS announced_items jsonb;
ALTER TABLE inventory_orders ADD COLUMN IF NOT EXISTS announced_customer text;
ALTER TABLE inventory_orders ADD COLUMN IF NOT EXISTS announced_amount bigint;
DO $$ BEGIN
    IF to_regclass('inventory_orders_unchecked') IS NULL THEN
        CREATE INDEX inventory_orders_unchecked
            ON inventory_orders (updated_at) WHERE NOT checked;
    END IF;
    IF to_regclass('inventory_orders_held') IS NULL THEN
        CREATE INDEX inventory_orders_held
            ON inventory_orders (held_at) WHERE held_data IS NOT NULL AND NOT orphan_reported;
    END IF;
END $$;

-- The available stock of an SKU, split over StockShards rows so that concurrent
-- reservations rarely lock the same row (see stock.go, "Stock moves", and
-- docs/architecture.md, "Hot rows"). A transaction takes from the shard its first order
-- hashes to, then from the next ones; releases go back to that shard.
CREATE TABLE IF NOT EXISTS inventory_stock_shards (
    sku       text NOT NULL REFERENCES inventory_stock (sku),
    shard     int NOT NULL CHECK (shard >= 0),
    available bigint NOT NULL CHECK (available >= 0),
    PRIMARY KEY (sku, shard)
);

-- Applies a transaction's stock changes (stock.go, applyDeltas): locks the shards' rows
-- in (sku, shard) order, adds each change, and fails with a serialization failure
-- (SQLSTATE 40001, retried by the consumer) unless every shard exists and keeps
-- available >= 0. One statement, so that it can go out in the COMMIT's round trip: the
-- shards stay locked for that statement and the commit only.
CREATE OR REPLACE FUNCTION inventory_apply_stock(skus text[], shards int[], deltas bigint[])
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    changed bigint;
BEGIN
    PERFORM 1 FROM inventory_stock_shards
    WHERE (sku, shard) IN (SELECT * FROM unnest(skus, shards))
    ORDER BY sku, shard FOR NO KEY UPDATE;
    UPDATE inventory_stock_shards s SET available = s.available + r.d
    FROM unnest(skus, shards, deltas) AS r (sku, shard, d)
    WHERE s.sku = r.sku AND s.shard = r.shard AND s.available + r.d >= 0;
    GET DIAGNOSTICS changed = ROW_COUNT;
    IF changed <> cardinality(skus) THEN
        RAISE EXCEPTION USING ERRCODE = 'serialization_failure',
            MESSAGE = format('stock changed since it was read: %s of %s stock shards had the stock this transaction decided on',
                changed, cardinality(skus));
    END IF;
END $$;
