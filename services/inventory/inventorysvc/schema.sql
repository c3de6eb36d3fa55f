-- inventory service schema (idempotent; applied at every start under an advisory lock).

-- Stock per SKU. Conservation, per SKU:
--   initial_qty = available + Σ qty of reservations in status reserved or committed.
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

CREATE INDEX IF NOT EXISTS inventory_reservations_expiry
    ON inventory_reservations (expires_at) WHERE status = 'reserved';

-- The items a reservation holds (or held), one row per SKU.
CREATE TABLE IF NOT EXISTS inventory_reservation_items (
    order_id text NOT NULL REFERENCES inventory_reservations (order_id),
    sku      text NOT NULL REFERENCES inventory_stock (sku),
    qty      bigint NOT NULL CHECK (qty > 0),
    PRIMARY KEY (order_id, sku)
);
