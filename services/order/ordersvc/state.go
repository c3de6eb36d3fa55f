package ordersvc

import (
	"fmt"

	"github.com/choreo-saga/choreo/services/events"
)

// State is the state of an order.
type State string

// The order states. CONFIRMED, REJECTED, CANCELLED and COMPENSATION_FAILED are terminal:
// the saga has stopped, the order has no deadline and is never stuck. The first three are
// final: no trigger leads out of them and none emits an event. COMPENSATION_FAILED can
// still heal: the missing refund or release arriving late completes it to CANCELLED, and
// an operator can re-drive it to CANCELLING (command.retry_compensation).
const (
	// Pending: created, waiting for payment and stock.
	Pending State = "PENDING"
	// Confirmed: paid and stock reserved.
	Confirmed State = "CONFIRMED"
	// Rejected: payment declined, or stock unavailable and the payment refunded.
	Rejected State = "REJECTED"
	// Cancelling: a cancel was requested (by the customer or the saga deadline); the
	// order waits until payment and stock are both settled.
	Cancelling State = "CANCELLING"
	// Cancelled: compensation finished: nothing is charged and nothing is reserved.
	Cancelled State = "CANCELLED"
	// CompensationFailed: compensation did not finish although the cancellation was
	// re-sent ORDER_COMPENSATION_RETRIES times. The facts (payment/stock status) say which
	// side did not answer; its late answer still completes the order to CANCELLED, and
	// an operator can re-send the cancellation (POST /orders/{id}/retry-compensation).
	CompensationFailed State = "COMPENSATION_FAILED"
)

// States lists every state, non-terminal ones first.
var States = []State{Pending, Cancelling, Confirmed, Rejected, Cancelled, CompensationFailed}

// Terminal reports whether s is a final state.
func (s State) Terminal() bool {
	switch s {
	case Confirmed, Rejected, Cancelled, CompensationFailed:
		return true
	}
	return false
}

// Valid reports whether s is one of the order states.
func (s State) Valid() bool {
	for _, x := range States {
		if s == x {
			return true
		}
	}
	return false
}

// Trigger is what can move an order: an incoming event type, or a command.
type Trigger string

// Triggers. Event triggers are the event type names of services/events.
const (
	OnPaymentAuthorized Trigger = events.PaymentAuthorized
	OnPaymentDeclined   Trigger = events.PaymentDeclined
	OnPaymentRefunded   Trigger = events.PaymentRefunded
	OnStockReserved     Trigger = events.StockReserved
	OnStockUnavailable  Trigger = events.StockUnavailable
	OnStockReleased     Trigger = events.StockReleased

	// OnMismatch is a payment.authorized or stock.reserved whose amount, customer or items
	// differ from the order's (ErrMismatch): a forged or corrupted event. Its facts are
	// not observed; a PENDING order is cancelled.
	OnMismatch Trigger = "event.mismatch"

	// CmdCancel is POST /orders/{id}/cancel.
	CmdCancel Trigger = "command.cancel"
	// CmdSagaTimeout fires when a PENDING order passes its saga deadline.
	CmdSagaTimeout Trigger = "deadline.saga"
	// CmdCompensationTimeout fires when a CANCELLING order passes the deadline of its
	// current compensation attempt: it re-sends the cancellation while Facts.ResendsLeft
	// allows, and fails the compensation otherwise.
	CmdCompensationTimeout Trigger = "deadline.compensation"
	// CmdRetryCompensation is POST /orders/{id}/retry-compensation: an operator re-sends
	// the cancellation of a CANCELLING or COMPENSATION_FAILED order.
	CmdRetryCompensation Trigger = "command.retry_compensation"
)

// Facts are what the other services have reported about an order, recorded from every
// event whatever the state, plus the order's own budget of cancellation re-sends. The
// CANCELLING and COMPENSATION_FAILED states complete on them.
type Facts struct {
	PaymentAuthorized bool // payment.authorized seen: the customer was charged
	PaymentDeclined   bool // payment.declined seen: nothing was (or will be) charged
	PaymentRefunded   bool // payment.refunded seen: the charge was given back
	StockReserved     bool // stock.reserved seen
	StockUnavailable  bool // stock.unavailable seen: nothing was (or will be) reserved
	StockReleased     bool // stock.released seen: the reservation was given back

	// ResendsLeft is how many more times the compensation deadline may re-send
	// order.cancel_requested before the order fails: Settings.CompensationRetries minus
	// the re-sends so far (manual ones included). It is the order's own count, derived
	// when the order is read, not a report of another service; Observe never changes it.
	ResendsLeft int
}

// Observe records what trigger t says about the other services.
func (f *Facts) Observe(t Trigger) {
	switch t {
	case OnPaymentAuthorized:
		f.PaymentAuthorized = true
	case OnPaymentDeclined:
		f.PaymentDeclined = true
	case OnPaymentRefunded:
		f.PaymentRefunded = true
	case OnStockReserved:
		f.StockReserved = true
	case OnStockUnavailable:
		f.StockUnavailable = true
	case OnStockReleased:
		f.StockReleased = true
	}
}

// PaymentSettled: payment will not charge (declined) or has refunded.
func (f Facts) PaymentSettled() bool { return f.PaymentDeclined || f.PaymentRefunded }

// StockSettled: inventory released, or said it reserved nothing, or can never reserve
// because the payment was declined (inventory reserves only on payment.authorized).
func (f Facts) StockSettled() bool {
	return f.StockReleased || f.StockUnavailable || f.PaymentDeclined
}

// Compensated reports whether a cancelled order has been fully compensated: nothing is
// charged and nothing is reserved, and neither can change any more.
func (f Facts) Compensated() bool { return f.PaymentSettled() && f.StockSettled() }

// PaymentStatus summarises the payment facts for the API: none, authorized, declined
// or refunded.
func (f Facts) PaymentStatus() string {
	switch {
	case f.PaymentRefunded:
		return "refunded"
	case f.PaymentDeclined:
		return "declined"
	case f.PaymentAuthorized:
		return "authorized"
	}
	return "none"
}

// StockStatus summarises the stock facts for the API: none, reserved, unavailable or
// released.
func (f Facts) StockStatus() string {
	switch {
	case f.StockReleased:
		return "released"
	case f.StockUnavailable:
		return "unavailable"
	case f.StockReserved:
		return "reserved"
	}
	return "none"
}

// Guard is a condition on the facts that a rule needs to move to its target state; when
// it does not hold, the order stays where it is (the trigger is still recorded).
type Guard string

// Guards.
const (
	// Always: no condition.
	Always Guard = ""
	// WhenCompensated: Facts.Compensated.
	WhenCompensated Guard = "compensated"
	// WhenResendsLeft: Facts.ResendsLeft > 0.
	WhenResendsLeft Guard = "resends_left"
)

func (g Guard) holds(f Facts) bool {
	switch g {
	case WhenCompensated:
		return f.Compensated()
	case WhenResendsLeft:
		return f.ResendsLeft > 0
	}
	return true
}

// Rule is one row of the transition table.
type Rule struct {
	// To is the target state when Guard holds.
	To State
	// Guard must hold for the order to move to To; otherwise it stays in its state.
	Guard Guard
	// Emit is the event type published when the order moves to To ("" for none).
	Emit string
	// Noop marks a trigger that is accepted but changes and records nothing (a repeated
	// cancel).
	Noop bool
	// Else is the rule applied instead when Guard does not hold; nil means the order
	// stays in its state and emits nothing.
	Else *Rule
}

type ruleKey struct {
	from State
	on   Trigger
}

// transitions is THE transition table: every (state, trigger) pair that is allowed.
// Any pair missing here is an invalid transition: rejected, logged and, for events,
// recorded in the history as ignored.
var transitions = map[ruleKey]Rule{
	// The happy path and its failures.
	{Pending, OnPaymentAuthorized}: {To: Pending},
	{Pending, OnStockReserved}:     {To: Confirmed, Emit: events.OrderConfirmed},
	{Pending, OnPaymentDeclined}:   {To: Rejected, Emit: events.OrderRejected},
	{Pending, OnStockUnavailable}:  {To: Pending}, // payment refunds next; payment.refunded rejects
	{Pending, OnPaymentRefunded}:   {To: Rejected, Emit: events.OrderRejected},

	// Cancellation (by the customer or the saga deadline) and its completion.
	{Pending, CmdCancel}:      {To: Cancelling, Emit: events.OrderCancelRequested},
	{Pending, CmdSagaTimeout}: {To: Cancelling, Emit: events.OrderCancelRequested},
	// An event that does not match the order moved nothing; the order it tried to move
	// is cancelled and compensated. In any other state it is ignored.
	{Pending, OnMismatch}:   {To: Cancelling, Emit: events.OrderCancelRequested},
	{Cancelling, CmdCancel}: {To: Cancelling, Noop: true},
	{Cancelled, CmdCancel}:  {To: Cancelled, Noop: true},

	// While cancelling, in-flight events of the forward path are recorded (a late
	// stock.reserved keeps the order here until stock.released arrives), and each
	// settling event completes the cancellation once both sides are settled.
	{Cancelling, OnPaymentAuthorized}: {To: Cancelling},
	{Cancelling, OnStockReserved}:     {To: Cancelling},
	{Cancelling, OnPaymentDeclined}:   {To: Cancelled, Guard: WhenCompensated, Emit: events.OrderCancelled},
	{Cancelling, OnPaymentRefunded}:   {To: Cancelled, Guard: WhenCompensated, Emit: events.OrderCancelled},
	{Cancelling, OnStockUnavailable}:  {To: Cancelled, Guard: WhenCompensated, Emit: events.OrderCancelled},
	{Cancelling, OnStockReleased}:     {To: Cancelled, Guard: WhenCompensated, Emit: events.OrderCancelled},

	// Compensation is retried before it fails: at the deadline of each attempt the order
	// re-sends its cancellation (same saga, a new event id, a longer deadline) while
	// re-sends are left, and only then fails. Every send is a history entry.
	{Cancelling, CmdCompensationTimeout}: {To: Cancelling, Guard: WhenResendsLeft, Emit: events.OrderCancelRequested,
		Else: &Rule{To: CompensationFailed}},
	// An operator re-sends the cancellation by hand; a failed compensation is
	// CANCELLING again, with a deadline of its own.
	{Cancelling, CmdRetryCompensation}:         {To: Cancelling, Emit: events.OrderCancelRequested},
	{CompensationFailed, CmdRetryCompensation}: {To: Cancelling, Emit: events.OrderCancelRequested},

	// A failed compensation still heals: the missing refund or release arriving late
	// completes it exactly as it would have completed CANCELLING (same guard), and the
	// forward path's late facts are recorded.
	{CompensationFailed, OnPaymentAuthorized}: {To: CompensationFailed},
	{CompensationFailed, OnStockReserved}:     {To: CompensationFailed},
	{CompensationFailed, OnPaymentDeclined}:   {To: Cancelled, Guard: WhenCompensated, Emit: events.OrderCancelled},
	{CompensationFailed, OnPaymentRefunded}:   {To: Cancelled, Guard: WhenCompensated, Emit: events.OrderCancelled},
	{CompensationFailed, OnStockUnavailable}:  {To: Cancelled, Guard: WhenCompensated, Emit: events.OrderCancelled},
	{CompensationFailed, OnStockReleased}:     {To: Cancelled, Guard: WhenCompensated, Emit: events.OrderCancelled},

	// Expected late events, recorded (not flagged) in terminal states. Payment and
	// inventory events come from two topics, so the order sees them in any order across
	// topics (only events of one topic keep their order): inventory's stock.reserved can
	// overtake the payment.authorized that caused it, and payment's refund can overtake
	// the stock.unavailable that caused it. And a cancel completes as soon as both sides
	// are settled, so inventory's answer to it can come after CANCELLED (its
	// stock.released after payment declined a held order, or stock.unavailable for a
	// reservation it refused because of the cancel).
	{Confirmed, OnPaymentAuthorized}: {To: Confirmed},
	{Rejected, OnStockUnavailable}:   {To: Rejected},
	{Cancelled, OnStockReleased}:     {To: Cancelled},
	{Cancelled, OnStockUnavailable}:  {To: Cancelled},
	// A re-sent cancellation is answered again (payment and inventory repeat their
	// answer without moving money or stock), possibly after the first answer completed
	// the order.
	{Cancelled, OnPaymentRefunded}: {To: Cancelled},
	{Cancelled, OnPaymentDeclined}: {To: Cancelled},
	// The reconciliations of payment and inventory give back what an order that ended
	// without needing it still held, and say so.
	{Rejected, OnPaymentRefunded}: {To: Rejected},
	{Rejected, OnStockReleased}:   {To: Rejected},
}

// Lookup returns the rule for trigger t in state s, and whether one exists.
func Lookup(s State, t Trigger) (Rule, bool) {
	r, ok := transitions[ruleKey{s, t}]
	return r, ok
}

// Decision is the outcome of Decide.
type Decision struct {
	From, To State
	// Emit is the event type to publish ("" for none).
	Emit string
	// Noop: accepted, nothing to record.
	Noop bool
	// Facts are the facts after observing the trigger.
	Facts Facts
}

// Decide applies trigger t to an order in state s with facts f: it records the trigger's
// facts and looks the transition up. It returns an error wrapping ErrInvalidTransition
// when the table has no rule for (s, t); the returned Decision still carries the updated
// facts (From == To == s) so that callers can record them.
func Decide(s State, f Facts, t Trigger) (Decision, error) {
	f.Observe(t)
	d := Decision{From: s, To: s, Facts: f}
	r, ok := Lookup(s, t)
	if !ok {
		return d, fmt.Errorf("%w: %s on %s", ErrInvalidTransition, t, s)
	}
	if r.Noop {
		d.Noop = true
		return d, nil
	}
	for !r.Guard.holds(f) {
		if r.Else == nil {
			return d, nil
		}
		r = *r.Else
	}
	d.To, d.Emit = r.To, r.Emit
	return d, nil
}
