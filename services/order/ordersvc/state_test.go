package ordersvc

import (
	"errors"
	"testing"
)

var allTriggers = []Trigger{OnPaymentAuthorized, OnPaymentDeclined, OnPaymentRefunded,
	OnStockReserved, OnStockUnavailable, OnStockReleased, OnMismatch, CmdCancel, CmdSagaTimeout, CmdCompensationTimeout, CmdRetryCompensation}

func TestDecideTable(t *testing.T) {
	charged := Facts{PaymentAuthorized: true}
	chargedAndReserved := Facts{PaymentAuthorized: true, StockReserved: true}
	refunded := Facts{PaymentAuthorized: true, PaymentRefunded: true}
	released := Facts{PaymentAuthorized: true, StockReserved: true, StockReleased: true}
	tests := []struct {
		name  string
		state State
		facts Facts
		on    Trigger
		to    State
		emit  string
		noop  bool
	}{
		{"authorized keeps pending", Pending, Facts{}, OnPaymentAuthorized, Pending, "", false},
		{"reserved confirms", Pending, charged, OnStockReserved, Confirmed, "order.confirmed", false},
		{"declined rejects", Pending, Facts{}, OnPaymentDeclined, Rejected, "order.rejected", false},
		{"unavailable waits for the refund", Pending, charged, OnStockUnavailable, Pending, "", false},
		{"refund after unavailable rejects", Pending, Facts{PaymentAuthorized: true, StockUnavailable: true}, OnPaymentRefunded, Rejected, "order.rejected", false},
		{"cancel", Pending, Facts{}, CmdCancel, Cancelling, "order.cancel_requested", false},
		{"saga deadline cancels", Pending, charged, CmdSagaTimeout, Cancelling, "order.cancel_requested", false},
		{"repeated cancel is a no-op", Cancelling, Facts{}, CmdCancel, Cancelling, "", true},
		{"cancel of cancelled is a no-op", Cancelled, Facts{}, CmdCancel, Cancelled, "", true},
		{"late reservation keeps cancelling", Cancelling, charged, OnStockReserved, Cancelling, "", false},
		{"authorized while cancelling", Cancelling, Facts{}, OnPaymentAuthorized, Cancelling, "", false},
		{"refund alone is not enough when stock was reserved", Cancelling, chargedAndReserved, OnPaymentRefunded, Cancelling, "", false},
		{"release alone is not enough when charged", Cancelling, chargedAndReserved, OnStockReleased, Cancelling, "", false},
		{"release after refund completes", Cancelling, Facts{PaymentAuthorized: true, StockReserved: true, PaymentRefunded: true}, OnStockReleased, Cancelled, "order.cancelled", false},
		{"refund after release completes", Cancelling, released, OnPaymentRefunded, Cancelled, "order.cancelled", false},
		{"decline while cancelling completes (nothing charged, nothing reserved)", Cancelling, Facts{}, OnPaymentDeclined, Cancelled, "order.cancelled", false},
		{"refund with nothing ever reserved waits for inventory's answer", Cancelling, charged, OnPaymentRefunded, Cancelling, "", false},
		{"unavailable after refund completes", Cancelling, refunded, OnStockUnavailable, Cancelled, "order.cancelled", false},
		{"compensation deadline fails once no re-send is left", Cancelling, charged, CmdCompensationTimeout, CompensationFailed, "", false},
		{"compensation deadline re-sends while re-sends are left", Cancelling, Facts{PaymentAuthorized: true, ResendsLeft: 1}, CmdCompensationTimeout, Cancelling, "order.cancel_requested", false},
		{"retry by hand while cancelling re-sends", Cancelling, charged, CmdRetryCompensation, Cancelling, "order.cancel_requested", false},
		{"retry by hand re-drives a failed compensation", CompensationFailed, charged, CmdRetryCompensation, Cancelling, "order.cancel_requested", false},
		{"a late refund heals a failed compensation", CompensationFailed, released, OnPaymentRefunded, Cancelled, "order.cancelled", false},
		{"a late release heals a failed compensation", CompensationFailed, Facts{PaymentAuthorized: true, StockReserved: true, PaymentRefunded: true}, OnStockReleased, Cancelled, "order.cancelled", false},
		{"a late decline heals a failed compensation", CompensationFailed, Facts{}, OnPaymentDeclined, Cancelled, "order.cancelled", false},
		{"half an answer keeps the compensation failed", CompensationFailed, chargedAndReserved, OnPaymentRefunded, CompensationFailed, "", false},
		{"a late reservation is recorded in a failed compensation", CompensationFailed, charged, OnStockReserved, CompensationFailed, "", false},
		{"a repeated refund after cancelled is recorded", Cancelled, refunded, OnPaymentRefunded, Cancelled, "", false},
		{"a reconciliation refund after rejected is recorded", Rejected, charged, OnPaymentRefunded, Rejected, "", false},
		{"a reconciliation release after rejected is recorded", Rejected, chargedAndReserved, OnStockReleased, Rejected, "", false},
		{"the reservation overtook its authorization", Confirmed, Facts{StockReserved: true}, OnPaymentAuthorized, Confirmed, "", false},
		{"the refund overtook the stock failure", Rejected, refunded, OnStockUnavailable, Rejected, "", false},
		{"reserved before authorized confirms", Pending, Facts{}, OnStockReserved, Confirmed, "order.confirmed", false},
		{"inventory's late answer after a declined cancel is recorded", Cancelled, Facts{PaymentDeclined: true}, OnStockReleased, Cancelled, "", false},
		{"a late refusal after cancel is recorded", Cancelled, refunded, OnStockUnavailable, Cancelled, "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, err := Decide(tt.state, tt.facts, tt.on)
			if err != nil {
				t.Fatalf("Decide(%s, %s): %v", tt.state, tt.on, err)
			}
			if d.From != tt.state || d.To != tt.to || d.Emit != tt.emit || d.Noop != tt.noop {
				t.Fatalf("Decide(%s, %+v, %s) = %+v; want to=%s emit=%q noop=%v", tt.state, tt.facts, tt.on, d, tt.to, tt.emit, tt.noop)
			}
		})
	}
}

func TestDecideRejectsInvalidTransitions(t *testing.T) {
	invalid := []struct {
		state State
		on    Trigger
	}{
		{Pending, OnStockReleased},        // nothing was ever cancelled
		{Pending, CmdCompensationTimeout}, // not compensating
		{Cancelling, CmdSagaTimeout},      // the saga deadline is over once cancelling
		{Confirmed, CmdCancel},            // too late to cancel
		{Rejected, CmdCancel},             //
		{CompensationFailed, CmdCancel},   //
		{Confirmed, OnStockReleased},      // a terminal state has no exits
		{Cancelled, OnStockReserved},      //
		{Rejected, OnStockReserved},       //
		{CompensationFailed, CmdSagaTimeout},
		{Pending, CmdRetryCompensation},   // nothing to compensate
		{Confirmed, CmdRetryCompensation}, //
		{Cancelled, CmdRetryCompensation}, // compensation finished
	}
	for _, tt := range invalid {
		facts := Facts{PaymentAuthorized: true}
		d, err := Decide(tt.state, facts, tt.on)
		if !errors.Is(err, ErrInvalidTransition) {
			t.Errorf("Decide(%s, %s) err = %v; want ErrInvalidTransition", tt.state, tt.on, err)
		}
		if d.To != tt.state || d.Emit != "" {
			t.Errorf("Decide(%s, %s) = %+v; an invalid trigger must not move or emit", tt.state, tt.on, d)
		}
		// The facts of the trigger are still observed, so they can be recorded.
		want := facts
		want.Observe(tt.on)
		if d.Facts != want {
			t.Errorf("Decide(%s, %s) facts = %+v; want %+v", tt.state, tt.on, d.Facts, want)
		}
	}
}

// TestTerminalStatesHaveNoExits walks every (terminal state, trigger) pair: none may
// lead to another state or emit an event, except COMPENSATION_FAILED's two ways to heal:
// to CANCELLED once compensated, and back to CANCELLING by hand.
func TestTerminalStatesHaveNoExits(t *testing.T) {
	for _, s := range States {
		if !s.Terminal() {
			continue
		}
		for _, tr := range allTriggers {
			r, ok := Lookup(s, tr)
			if !ok || r.To == s && r.Emit == "" && r.Else == nil {
				continue
			}
			heals := s == CompensationFailed &&
				(r.To == Cancelled && r.Guard == WhenCompensated && r.Emit == "order.cancelled" && r.Else == nil ||
					tr == CmdRetryCompensation && r.To == Cancelling)
			if !heals {
				t.Errorf("terminal %s has an exit on %s: %+v", s, tr, r)
			}
		}
	}
}

// Every rule out of COMPENSATION_FAILED towards CANCELLED has the guard of the same
// trigger's rule out of CANCELLING: late facts heal exactly as timely ones complete.
func TestCompensationFailedHealsLikeCancelling(t *testing.T) {
	for _, tr := range allTriggers {
		r, ok := Lookup(CompensationFailed, tr)
		if !ok || r.To != Cancelled {
			continue
		}
		c, ok := Lookup(Cancelling, tr)
		if !ok || c.To != Cancelled || c.Guard != r.Guard || c.Emit != r.Emit {
			t.Errorf("%s: COMPENSATION_FAILED rule %+v differs from CANCELLING's %+v", tr, r, c)
		}
	}
}

// The compensation deadline re-sends exactly ResendsLeft times, then fails.
func TestCompensationDeadlineIsBounded(t *testing.T) {
	for left := 3; left >= 0; left-- {
		d, err := Decide(Cancelling, Facts{PaymentAuthorized: true, ResendsLeft: left}, CmdCompensationTimeout)
		if err != nil {
			t.Fatal(err)
		}
		resend := d.To == Cancelling && d.Emit == "order.cancel_requested"
		if left > 0 && !resend || left == 0 && (d.To != CompensationFailed || d.Emit != "") {
			t.Errorf("ResendsLeft %d: %+v", left, d)
		}
	}
}

// TestEveryNonTerminalStateCanEnd checks that from every non-terminal state some
// sequence of triggers reaches a terminal state, so no state is a trap.
func TestEveryNonTerminalStateCanEnd(t *testing.T) {
	for _, s := range States {
		if s.Terminal() {
			continue
		}
		seen := map[State]bool{s: true}
		queue := []State{s}
		reached := false
		for len(queue) > 0 && !reached {
			cur := queue[0]
			queue = queue[1:]
			for _, tr := range allTriggers {
				if r, ok := Lookup(cur, tr); ok && !seen[r.To] {
					seen[r.To] = true
					reached = reached || r.To.Terminal()
					queue = append(queue, r.To)
				}
			}
		}
		if !reached {
			t.Errorf("no terminal state is reachable from %s", s)
		}
	}
}

func TestFactsSummaries(t *testing.T) {
	tests := []struct {
		f              Facts
		payment, stock string
		compensated    bool
	}{
		{Facts{}, "none", "none", false},
		{Facts{PaymentDeclined: true}, "declined", "none", true},
		{Facts{PaymentAuthorized: true, StockReserved: true}, "authorized", "reserved", false},
		{Facts{PaymentAuthorized: true, PaymentRefunded: true, StockUnavailable: true}, "refunded", "unavailable", true},
		{Facts{PaymentAuthorized: true, PaymentRefunded: true, StockReserved: true, StockReleased: true}, "refunded", "released", true},
		{Facts{PaymentAuthorized: true, PaymentRefunded: true, StockReserved: true}, "refunded", "reserved", false},
	}
	for _, tt := range tests {
		if got := tt.f.PaymentStatus(); got != tt.payment {
			t.Errorf("%+v PaymentStatus = %s; want %s", tt.f, got, tt.payment)
		}
		if got := tt.f.StockStatus(); got != tt.stock {
			t.Errorf("%+v StockStatus = %s; want %s", tt.f, got, tt.stock)
		}
		if got := tt.f.Compensated(); got != tt.compensated {
			t.Errorf("%+v Compensated = %v; want %v", tt.f, got, tt.compensated)
		}
	}
}
