// Package inventorysvc is the inventory service of the choreo reference saga: it
// reserves stock for paid orders, all items or none, holds reservations for a TTL,
// commits them when the order is confirmed, and releases them (a forward action) when
// the order is cancelled or the reservation expires.
//
// It consumes orders.events and payments.events in consumer group "inventory" through
// the standard consumer chain (per-order Redis lock, idempotent Postgres transaction)
// and publishes stock.reserved, stock.unavailable and stock.released on inventory.events
// only through the transactional outbox.
//
// # Guarantees
//
//   - All or nothing: the SKUs of an order are locked in SKU order (so concurrent orders
//     cannot deadlock), every quantity is checked, and one conditional UPDATE
//     (... WHERE available >= qty) takes them, in the handler's transaction.
//   - Stock is conserved, per SKU: initial = available + reserved + committed (see
//     TakeAudit); available never goes negative (table constraint).
//   - Cancel races: payment.authorized and order.cancel_requested travel on different
//     topics, so the cancel can arrive first. It then leaves a "cancelled" tombstone and
//     the later payment.authorized reserves nothing and answers stock.unavailable (reason
//     "order cancelled"), which makes payment refund. Every order's first cancel is
//     answered by exactly one stock.released listing what was actually released (empty
//     if nothing was held).
//   - Re-sent cancellations (attempt > 1) release nothing more, since compensation is keyed
//     on the order; inventory repeats its stock.released instead.
//   - No orphan reservations: stock is taken only for orders the order service announced
//     (order.created, recorded in inventory_orders) that have not ended REJECTED or
//     CANCELLED. A payment.authorized that overtakes its order's announcement is held
//     without effect and reserved when order.created arrives; the Reconciler reports one
//     held longer than INVENTORY_ORPHAN_AFTER, and releases, through a normal
//     stock.released, a reservation still held by an order that ended REJECTED or
//     CANCELLED (metric inventory.reconciliations, one log line per correction).
//   - Expiry: a Sweeper releases reservations older than the TTL that were neither
//     confirmed nor cancelled and emits stock.released (reason "reservation expired").
//   - Only what was announced: inventory records the items, customer and amount of each
//     order.created (inventory_orders.announced_*) and reserves only for a
//     payment.authorized that carries the same items (summed per SKU), customer and
//     amount. Any other reserves nothing and is dead-lettered with reason "mismatch"
//     (consumer.Reject; operation "mismatch"); a held one that differs is dropped when
//     order.created arrives. The order service checks the same event against its order
//     and cancels the order, whose compensation inventory then answers as any cancel.
//     Payment carries the items, so inventory needs no call to the order service, and
//     the check needs no payload of its own: order.created is the announcement.
//   - Counted once: operation counters and log lines of a decision run after its
//     transaction commits (consumer.AfterCommit), never for a rolled-back one.
//
// # Configuration
//
// Besides the shared variables of app.LoadConfig (DATABASE_URL default
// postgres://postgres@127.0.0.1:5432/choreo_inventory, HTTP_ADDR default :8082, ...):
//
//	INVENTORY_SEED             SKU:QTY,... ; SKU may be a range sku-1..sku-20 (default sku-1..sku-20:10000,sku-rare:0)
//	INVENTORY_RESERVATION_TTL  how long an unconfirmed reservation holds stock (default 15m)
//	INVENTORY_SWEEP_INTERVAL   pause between sweeps for expired reservations (default 5s)
//	INVENTORY_GROUP            consumer group (default inventory)
//	INVENTORY_RECONCILE_INTERVAL  period of the reconciliation (default 30s)
//	INVENTORY_ORPHAN_AFTER     how long a payment for an unannounced order is held before it is reported (default 5m)
//
// Seeding inserts missing SKUs only; a restart keeps stock levels.
package inventorysvc
