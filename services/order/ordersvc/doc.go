// Package ordersvc is the order service of choreo's reference saga: an HTTP API that
// places and cancels orders, an explicit state machine driven by the payment and
// inventory events, and durable deadlines that find stuck orders and compensate
// expired ones. The binary in services/order runs it with Run; this package is
// importable so that tests (services/e2e) can run the service in process.
//
// # HTTP API
//
//	POST /orders               {"customer_id":"c-1","items":[{"sku":"sku-1","qty":2}],"amount":4200}
//	                           201 with the order; with an Idempotency-Key header a retry of the
//	                           same request returns the same order (200, Idempotent-Replayed: true)
//	                           and another body with the same key is refused (422); 503
//	                           overloaded with Retry-After while ORDER_MAX_PENDING orders are
//	                           in flight in the saga (a replay is still answered)
//	                           (every route: 503 unavailable with Retry-After when Postgres
//	                           refuses or drops the connection, see UnavailableRetryAfter)
//	GET  /orders/{id}          200: the order with trace_id, jaeger_url, stuck and its full history
//	POST /orders/{id}/cancel   202: PENDING -> CANCELLING (a repeated cancel is a no-op);
//	                           409 invalid_transition once the order is CONFIRMED or REJECTED
//	POST /orders/{id}/retry-compensation
//	                           202: re-sends order.cancel_requested of a CANCELLING order, or
//	                           moves a COMPENSATION_FAILED one back to CANCELLING and re-sends it;
//	                           409 invalid_transition in any other state
//	GET  /orders?state=PENDING&stuck=true&older_than=5m&limit=100
//	                           200 {"orders":[...]}, oldest first, each with age_seconds
//	GET  /orders/counts        200 {"by_state":{"PENDING":3,...},"stuck":{"PENDING":1,"CANCELLING":0}}
//	                           (every state, zeros included; sagactl console's overview)
//
// Input is validated (see CreateRequest.Validate), bodies are limited to MaxBodyBytes and
// must be one JSON object without unknown fields, and every error is a JSON body
// {"error":{"code":...,"message":...}} with one of the Code* codes; internal errors are
// logged and answered with a generic message.
//
// # Configuration
//
// LoadConfig reads the variables of app.LoadConfig (DATABASE_URL, REDIS_ADDR,
// KAFKA_BROKERS, HTTP_ADDR with default :8080, ...) and
//
//	JAEGER_UI_URL                 none base of each order's jaeger_url in the API (unset or empty: no links)
//	ORDER_STUCK_AFTER             30s  non-terminal orders longer than this in their state are stuck
//	ORDER_STUCK_AFTER_CANCELLING  = ORDER_STUCK_AFTER
//	ORDER_SAGA_TIMEOUT            2m   PENDING longer than this is cancelled (must exceed ORDER_STUCK_AFTER)
//	ORDER_COMPENSATION_TIMEOUT    30s  deadline of the first compensation attempt (doubled per attempt, at most 8x)
//	ORDER_COMPENSATION_RETRIES    3    re-sends of the cancellation before COMPENSATION_FAILED (0 to 20)
//	ORDER_SWEEP_INTERVAL          1s   period of the deadline sweeper and the stuck gauge
//	ORDER_GROUP                   order  consumer group of payments.events and inventory.events
//	ORDER_MAX_PENDING             300 new orders are refused (503) while this many are PENDING or CANCELLING (0: off)
//
// and reports every invalid value at once.
//
// # State machine
//
// One table (see Lookup and Decide) maps (state, trigger) to the next state; a trigger is
// an event type or a command (cancel, saga deadline, compensation deadline):
//
//	PENDING    + payment.authorized     -> PENDING     (fact recorded)
//	PENDING    + stock.reserved         -> CONFIRMED   emits order.confirmed
//	PENDING    + payment.declined       -> REJECTED    emits order.rejected
//	PENDING    + stock.unavailable      -> PENDING     (payment refunds next)
//	PENDING    + payment.refunded       -> REJECTED    emits order.rejected
//	PENDING    + cancel | saga deadline -> CANCELLING  emits order.cancel_requested
//	PENDING    + event.mismatch         -> CANCELLING  emits order.cancel_requested
//	CANCELLING + payment.* / stock.*    -> CANCELLED when compensated, emits order.cancelled;
//	                                       else stays CANCELLING (fact recorded)
//	CANCELLING + compensation deadline  -> CANCELLING, re-sends order.cancel_requested while
//	                                       re-sends are left; else COMPENSATION_FAILED
//	CANCELLING | COMPENSATION_FAILED + retry-compensation
//	                                    -> CANCELLING, re-sends order.cancel_requested
//	COMPENSATION_FAILED + payment.* / stock.*
//	                                    -> CANCELLED when compensated (same guard as CANCELLING),
//	                                       emits order.cancelled; else stays (fact recorded)
//	CANCELLING | CANCELLED + cancel     -> no-op (a repeated cancel succeeds)
//	CONFIRMED  + payment.authorized     -> CONFIRMED   (overtaken by stock.reserved, recorded)
//	REJECTED   + stock.unavailable | payment.refunded | stock.released
//	                                    -> REJECTED    (late answers, reconciliation, recorded)
//	CANCELLED  + stock.* | payment.refunded | payment.declined
//	                                    -> CANCELLED   (late or repeated answers, recorded)
//
// Events of one topic arrive in order (they are keyed by the order id), but the payment
// and inventory topics are consumed independently, so an effect can overtake its cause
// across them; the table accepts every such order.
//
// Every other pair is an invalid transition: it is never applied. An invalid command
// (cancelling a CONFIRMED order) is refused with ErrInvalidTransition (HTTP 409). An
// invalid event (an unexpected event in a terminal state, such as a reservation expiry
// after CONFIRMED) is settled and not
// retried: its facts and an "ignored" history entry are written, a warning is logged
// and MetricIgnored is counted. Each transition runs in one transaction that locks the
// order row (SELECT ... FOR UPDATE), updates it, appends to order_history (from, to,
// causing event id and type, time) and enqueues the outgoing event in the outbox. An event
// of the forward path arriving as usual (payment's answer to a PENDING order with no
// facts yet, inventory's answer after payment.authorized) skips the separate lock: the
// transition is decided for that state and those facts and written by one statement that
// updates the row only if it still has exactly them (the UPDATE's own row lock and READ
// COMMITTED's recheck make that the state decided on) and appends the history entry only
// if it did; any other state takes the locked path. The orders table keeps a fifth of
// each page free (fillfactor 80): the first update of an order, a fact on a PENDING
// order, changes no indexed column and so is a HOT update (no new index entries) when
// its page has room.
//
// # Cross-checks
//
// A payment.authorized is applied only when its amount, customer and items (summed per
// SKU) are the order's, a stock.reserved only when its items are: the order service
// announced the order, so it knows what payment and inventory must have done for it.
// The fast path's UPDATE carries the same conditions. Any other such event (a forged
// one with the right source and topic, a corrupted one) is never applied: its facts
// are not recorded, a PENDING order moves to CANCELLING (trigger event.mismatch, the
// cause in the history) so that payment refunds whatever it charged and inventory
// releases whatever it reserved, an order in any other state records it as ignored,
// MetricMismatched is counted, a warning is logged, and the event is dead-lettered with
// reason "mismatch" (consumer.Reject: the cancellation commits, then the event goes to
// the dead-letter topic). Inventory checks the payment against order.created the same
// way before it reserves (see inventorysvc).
//
// # Cancellation races
//
// The order records what payment and inventory report (Facts) whatever its state, and
// CANCELLING completes only when both sides are settled: the payment was declined or
// refunded, and the stock was released, reported unavailable, or can never be reserved
// (payment declined). A stock.reserved that arrives while CANCELLING therefore keeps the
// order there until stock.released, and a cancel can never end in CANCELLED while money or
// stock is still held. This relies on payment answering order.cancel_requested with a
// refund (or a decline when it never charged), and on inventory always answering it with
// stock.released and refusing later reservations for the order.
//
// # Deadlines and stuck orders
//
// Each non-terminal order has a durable deadline (column deadline_at): the saga deadline
// while PENDING (SagaTimeout), the deadline of the current compensation attempt while
// CANCELLING (CompensationTimeout for the first send of the cancellation, doubled for each
// next one, at most MaxCompensationBackoff times). RunSweeper handles expired orders every
// SweepInterval: PENDING to CANCELLING (compensation runs as for a customer cancel); a
// CANCELLING order re-sends its cancellation (a new event id, the same saga, a history
// entry, MetricCompensationResends) up to CompensationRetries times, and then moves to
// COMPENSATION_FAILED, which is terminal and visible (state, reason, metric, log at error
// level), never a silent retry loop. Payment and inventory compensate at most once per
// order and answer a re-send again, so re-sends are safe. COMPENSATION_FAILED still heals:
// the late refund or release completes it to CANCELLED, and RetryCompensation (HTTP, or
// sagactl order retry-compensation) re-drives it by hand. Independently, a non-terminal order that has stayed
// in its state longer than StuckAfter[state] is stuck: GET /orders?stuck=true lists
// such orders, GET /orders/{id} flags them, and MetricStuck counts them.
//
// # Tracing
//
// The span of POST /orders is the root of the saga's trace; its ids are stored on the
// order (trace_id, and jaeger_url built from JaegerUIURL in the API). Work on an existing
// order started outside a consumer (a cancel, a deadline) runs in a span whose parent is
// that stored span, linked to the caller's span, so the whole saga, compensation
// included, is one trace. Every span carries saga.correlation_id and order.id.
package ordersvc
