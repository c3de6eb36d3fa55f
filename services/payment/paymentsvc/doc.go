// Package paymentsvc is the payment service of the choreo reference saga: it charges the
// customer of every new order, declines orders above the customer's per-charge limit or
// balance, and refunds (a forward action, never a rollback) when inventory cannot
// reserve the stock or the order is cancelled.
//
// It consumes orders.events and inventory.events in consumer group "payment" through the
// standard consumer chain (per-order Redis lock, idempotent Postgres transaction) and
// publishes payment.authorized, payment.declined and payment.refunded on payments.events
// only through the transactional outbox.
//
// # Guarantees
//
//   - Never charged twice: one payment_orders row per order (primary key) and at most one
//     ledger charge row per order.
//   - Never refunded more than charged, and at most once: one ledger refund row per
//     order; refunded_amount <= charged_amount is a table constraint.
//   - Money is conserved: Σ balance + Σ (charged − refunded) = Σ initial balance (see
//     TakeAudit).
//   - Cancel races: an order.cancel_requested seen before the order's order.created leaves
//     a "cancelled" tombstone, so the later order.created charges nothing. For every
//     cancel, payment answers exactly once per order: payment.refunded (it had charged) or
//     payment.declined with reason "cancelled" (it had charged nothing); if it had already
//     declined or refunded, that earlier event was the answer and nothing more is sent.
//   - Re-sent cancellations (attempt > 1, when the order did not hear back in time) move
//     no money: compensation is keyed on the order, not on the event id. Payment repeats
//     its earlier answer instead.
//   - No orphan charges: only an order.created from the order service charges, and not
//     for an order whose REJECTED or CANCELLED outcome is already known. The outcomes the
//     order service announces (order.confirmed, order.rejected, order.cancelled) are
//     recorded, and a Reconciler refunds, through a normal payment.refunded, a charge still
//     held by an order that ended REJECTED or CANCELLED (metric payment.reconciliations,
//     one log line per correction).
//   - Counted once: payment.operations, payment.amount and the "authorized", "declined"
//     and "refunded" log lines run after the decision's transaction commits
//     (consumer.AfterCommit); a COMMIT lost to a fault and retried counts once, so over
//     a process's life payment.amount matches the ledger rows it wrote.
//
// # Configuration
//
// Besides the shared variables of app.LoadConfig (DATABASE_URL default
// postgres://postgres@127.0.0.1:5432/choreo_payment, HTTP_ADDR default :8081, ...):
//
//	PAYMENT_SEED_CUSTOMERS  ID:BALANCE[:LIMIT],... in cents; ID may be a range c-1..c-100
//	                        (default c-1..c-100:10000000:100000,c-poor:100000:100,c-hang:10000000:100000)
//	PAYMENT_HANG_CUSTOMERS  customers whose orders are held and never answered (default c-hang; none disables)
//	PAYMENT_LATENCY         added gateway latency per charge (default 0)
//	PAYMENT_FAILURE_RATE    probability of a retryable gateway failure per charge attempt (default 0)
//	PAYMENT_GROUP           consumer group (default payment)
//	PAYMENT_RECONCILE_INTERVAL  period of the reconciliation (default 30s)
//	PAYMENT_AUTHORIZED_VERSION  schema version of the payment.authorized written, 1 or 2 (default 1)
//
// Seeding inserts missing customers only; a restart keeps balances.
package paymentsvc
