package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/choreo-saga/choreo/consumer"
	"github.com/choreo-saga/choreo/services/events"
	"github.com/choreo-saga/choreo/services/order/ordersvc"
)

// Anomaly is one violated invariant.
type Anomaly struct {
	Invariant string `json:"invariant"`
	// OrderID is the order concerned ("" for a system-wide anomaly).
	OrderID string `json:"order_id,omitempty"`
	Detail  string `json:"detail"`
}

// Invariant names.
const (
	InvTerminal      = "every order terminal"
	InvNoCompFailed  = "no order ends COMPENSATION_FAILED"
	InvOneCharge     = "at most one charge per order"
	InvRefund        = "refunds only for charged, unconfirmed orders"
	InvChargeSettled = "every charge confirmed or refunded"
	InvMoney         = "money conserved"
	InvStock         = "stock conserved"
	InvStockHeld     = "stock held exactly by confirmed orders"
	InvDLQ           = "no non-poison event in a DLQ"
	InvPoison        = "every poison record dead-lettered with its reason"
	InvOutbox        = "outbox tables drained"
	InvHistory       = "order history is a valid path of the state machine"
	InvNoDeadline    = "no order cancelled by its saga deadline"
)

// order is an order as the checks read it from the order database.
type order struct {
	id, state string
	created   time.Time
	since     time.Time
}

// checker reads the databases and topics of a quiesced system.
type checker struct {
	s     *System
	pools map[string]*pgxpool.Pool
	out   []Anomaly
	dlq   int // records in the .dlq topics
}

func (c *checker) add(inv, orderID, format string, args ...any) {
	c.out = append(c.out, Anomaly{Invariant: inv, OrderID: orderID, Detail: fmt.Sprintf(format, args...)})
}

// check verifies every invariant and returns the anomalies, ordered by invariant and
// order id, and the number of records in the .dlq topics. A non-zero noDeadlineSince
// adds the overload scenario's invariant for the orders created since then.
func (s *System) check(ctx context.Context, poison []poisonRecord, noDeadlineSince time.Time) ([]Anomaly, int, error) {
	c := &checker{s: s, pools: map[string]*pgxpool.Pool{}}
	for _, svc := range services {
		p, err := s.pool(ctx, svc)
		if err != nil {
			return nil, 0, err
		}
		defer p.Close()
		c.pools[svc] = p
	}
	orders, err := c.orders(ctx)
	if err != nil {
		return nil, 0, err
	}
	for _, f := range []func(context.Context, map[string]order) error{
		c.terminal, c.history, c.payments, c.stock, c.outboxes,
	} {
		if err := f(ctx, orders); err != nil {
			return nil, 0, err
		}
	}
	if err := c.deadLetters(ctx, poison); err != nil {
		return nil, 0, err
	}
	if !noDeadlineSince.IsZero() {
		if err := c.noDeadline(ctx, noDeadlineSince); err != nil {
			return nil, 0, err
		}
	}
	slices.SortStableFunc(c.out, func(a, b Anomaly) int {
		if a.Invariant != b.Invariant {
			return strings.Compare(a.Invariant, b.Invariant)
		}
		return strings.Compare(a.OrderID, b.OrderID)
	})
	return c.out, c.dlq, nil
}

func (c *checker) orders(ctx context.Context) (map[string]order, error) {
	rows, err := c.pools["order"].Query(ctx, "SELECT id::text, state, created_at, state_since FROM orders")
	if err != nil {
		return nil, fmt.Errorf("chaos: read orders: %w", err)
	}
	out := make(map[string]order)
	var o order
	_, err = pgx.ForEachRow(rows, []any{&o.id, &o.state, &o.created, &o.since}, func() error {
		out[o.id] = o
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("chaos: read orders: %w", err)
	}
	return out, nil
}

// terminal: every order is in a terminal state, and none in COMPENSATION_FAILED.
func (c *checker) terminal(_ context.Context, orders map[string]order) error {
	now := time.Now()
	for _, o := range orders {
		st := ordersvc.State(o.state)
		switch {
		case !st.Terminal():
			c.add(InvTerminal, o.id, "%s for %s (created %s ago)", o.state, now.Sub(o.since).Round(time.Second), now.Sub(o.created).Round(time.Second))
		case st == ordersvc.CompensationFailed:
			c.add(InvNoCompFailed, o.id, "COMPENSATION_FAILED since %s", o.since.Format(time.RFC3339))
		}
	}
	return nil
}

// history: each order's history is a path of the transition table: it starts with the
// creation (→ PENDING), each applied entry leaves the state the previous one reached, by
// a trigger the table allows in that state, to the rule's target (or, for a guarded rule,
// the same state); ignored entries change nothing.
func (c *checker) history(ctx context.Context, orders map[string]order) error {
	rows, err := c.pools["order"].Query(ctx, `SELECT order_id::text, from_state, to_state, cause_event_type, ignored
		FROM order_history ORDER BY order_id, id`)
	if err != nil {
		return fmt.Errorf("chaos: read order history: %w", err)
	}
	type entry struct {
		from, to, cause string
		ignored         bool
	}
	hist := make(map[string][]entry)
	var (
		id string
		e  entry
	)
	if _, err := pgx.ForEachRow(rows, []any{&id, &e.from, &e.to, &e.cause, &e.ignored}, func() error {
		hist[id] = append(hist[id], e)
		return nil
	}); err != nil {
		return fmt.Errorf("chaos: read order history: %w", err)
	}
	for id, o := range orders {
		h := hist[id]
		if len(h) == 0 || h[0].from != "" || h[0].to != string(ordersvc.Pending) {
			c.add(InvHistory, id, "history does not start with the creation into PENDING: %v", h)
			continue
		}
		cur := ordersvc.Pending
		for i, e := range h[1:] {
			step := fmt.Sprintf("entry %d: %s -> %s on %s", i+2, e.from, e.to, e.cause)
			if e.from != string(cur) {
				c.add(InvHistory, id, "%s: leaves %s but the order was in %s", step, e.from, cur)
				break
			}
			if e.ignored {
				if e.to != e.from {
					c.add(InvHistory, id, "%s: an ignored entry changed the state", step)
				}
				continue
			}
			rule, ok := ordersvc.Lookup(cur, ordersvc.Trigger(e.cause))
			switch {
			case !ok:
				c.add(InvHistory, id, "%s: no rule for %s in %s", step, e.cause, cur)
			case rule.Noop:
				c.add(InvHistory, id, "%s: a no-op trigger was recorded", step)
			case !ruleAllows(rule, cur, ordersvc.State(e.to)):
				c.add(InvHistory, id, "%s: the rule leads to %s", step, rule.To)
			}
			cur = ordersvc.State(e.to)
		}
		if string(cur) != o.state {
			c.add(InvHistory, id, "history ends in %s, the order is %s", cur, o.state)
		}
	}
	return nil
}

// ruleAllows reports whether rule, applied in state from, may lead to to: its target, or,
// when it is guarded, what happens when the guard does not hold (its Else rule's target,
// or staying in from).
func ruleAllows(rule ordersvc.Rule, from, to ordersvc.State) bool {
	if to == rule.To {
		return true
	}
	if rule.Guard == ordersvc.Always {
		return false
	}
	if rule.Else != nil {
		return to == rule.Else.To
	}
	return to == from
}

// payments: charges and refunds from the payment ledger, by order.
func (c *checker) payments(ctx context.Context, orders map[string]order) error {
	rows, err := c.pools["payment"].Query(ctx, "SELECT order_id, kind, count(*), sum(amount) FROM payment_ledger GROUP BY 1, 2")
	if err != nil {
		return fmt.Errorf("chaos: read payment ledger: %w", err)
	}
	type money struct{ charges, refunds, charged, refunded int64 }
	byOrder := make(map[string]*money)
	var (
		id, kind string
		n, sum   int64
	)
	if _, err := pgx.ForEachRow(rows, []any{&id, &kind, &n, &sum}, func() error {
		m := byOrder[id]
		if m == nil {
			m = &money{}
			byOrder[id] = m
		}
		if kind == "charge" {
			m.charges, m.charged = m.charges+n, m.charged+sum
		} else {
			m.refunds, m.refunded = m.refunds+n, m.refunded+sum
		}
		return nil
	}); err != nil {
		return fmt.Errorf("chaos: read payment ledger: %w", err)
	}
	for id, m := range byOrder {
		o, known := orders[id]
		state := o.state
		if !known {
			state = "unknown to the order service"
		}
		if m.charges > 1 {
			c.add(InvOneCharge, id, "%d charges (%d cents) for an order %s", m.charges, m.charged, state)
		}
		if m.refunds > 0 && (m.charges == 0 || state == string(ordersvc.Confirmed)) {
			c.add(InvRefund, id, "%d refund(s) of %d cents, %d charge(s), order %s", m.refunds, m.refunded, m.charges, state)
		}
		if m.refunds > m.charges || m.refunded > m.charged {
			c.add(InvRefund, id, "refunded %d cents in %d refund(s) for %d cents in %d charge(s)", m.refunded, m.refunds, m.charged, m.charges)
		}
		if m.charges > 0 && m.refunds == 0 && state != string(ordersvc.Confirmed) {
			c.add(InvChargeSettled, id, "charged %d cents, not refunded, order %s", m.charged, state)
		}
	}
	for id, o := range orders {
		if o.state == string(ordersvc.Confirmed) && (byOrder[id] == nil || byOrder[id].charges == 0) {
			c.add(InvChargeSettled, id, "CONFIRMED without a charge")
		}
	}
	var balance, initial, charged, refunded int64
	if err := c.pools["payment"].QueryRow(ctx, `SELECT (SELECT coalesce(sum(balance), 0) FROM payment_customers),
		(SELECT coalesce(sum(initial_balance), 0) FROM payment_customers),
		(SELECT coalesce(sum(amount), 0) FROM payment_ledger WHERE kind = 'charge'),
		(SELECT coalesce(sum(amount), 0) FROM payment_ledger WHERE kind = 'refund')`).Scan(&balance, &initial, &charged, &refunded); err != nil {
		return fmt.Errorf("chaos: read balances: %w", err)
	}
	if balance+charged-refunded != initial {
		c.add(InvMoney, "", "balances %d + charged %d - refunded %d = %d, initial balances %d",
			balance, charged, refunded, balance+charged-refunded, initial)
	}
	return nil
}

// stock: per SKU, initial = available (not spread yet + in the SKU's shards) + held by reservations that hold stock (reserved
// or committed); and only confirmed orders hold stock, each of them.
func (c *checker) stock(ctx context.Context, orders map[string]order) error {
	rows, err := c.pools["inventory"].Query(ctx, `SELECT s.sku, s.initial_qty,
		s.available + coalesce((SELECT sum(sh.available) FROM inventory_stock_shards sh WHERE sh.sku = s.sku), 0),
		coalesce((SELECT sum(i.qty) FROM inventory_reservation_items i JOIN inventory_reservations r USING (order_id)
			WHERE i.sku = s.sku AND r.status IN ('reserved', 'committed')), 0)
		FROM inventory_stock s ORDER BY s.sku`)
	if err != nil {
		return fmt.Errorf("chaos: read stock: %w", err)
	}
	var (
		sku                    string
		initial, avail, heldBy int64
	)
	if _, err := pgx.ForEachRow(rows, []any{&sku, &initial, &avail, &heldBy}, func() error {
		if initial != avail+heldBy {
			c.add(InvStock, "", "%s: initial %d != available %d + held %d", sku, initial, avail, heldBy)
		}
		return nil
	}); err != nil {
		return fmt.Errorf("chaos: read stock: %w", err)
	}
	rows, err = c.pools["inventory"].Query(ctx, "SELECT order_id, status FROM inventory_reservations")
	if err != nil {
		return fmt.Errorf("chaos: read reservations: %w", err)
	}
	res := make(map[string]string)
	var id, status string
	if _, err := pgx.ForEachRow(rows, []any{&id, &status}, func() error { res[id] = status; return nil }); err != nil {
		return fmt.Errorf("chaos: read reservations: %w", err)
	}
	for id, status := range res {
		o, known := orders[id]
		holds := status == "reserved" || status == "committed"
		if holds && (!known || o.state != string(ordersvc.Confirmed)) {
			state := o.state
			if !known {
				state = "unknown to the order service"
			}
			c.add(InvStockHeld, id, "reservation %s for an order %s", status, state)
		}
	}
	for id, o := range orders {
		if o.state == string(ordersvc.Confirmed) && res[id] != "reserved" && res[id] != "committed" {
			c.add(InvStockHeld, id, "CONFIRMED but its reservation is %q", res[id])
		}
	}
	return nil
}

// outboxes: no row left in any service's outbox, nor in its dead-letter table (a row
// there is an event the relay gave up on: a lost saga step).
func (c *checker) outboxes(ctx context.Context, _ map[string]order) error {
	for _, svc := range services {
		var pending, dead int64
		if err := c.pools[svc].QueryRow(ctx, `SELECT (SELECT count(*) FROM choreo_outbox), (SELECT count(*) FROM choreo_outbox_dead)`).Scan(&pending, &dead); err != nil {
			return fmt.Errorf("chaos: read %s outbox: %w", svc, err)
		}
		if pending > 0 {
			c.add(InvOutbox, "", "%s: %d row(s) still in choreo_outbox", svc, pending)
		}
		if dead > 0 {
			c.add(InvOutbox, "", "%s: %d row(s) in choreo_outbox_dead (events never published)", svc, dead)
		}
	}
	return nil
}

// Headers the consumer's dead-letter copy carries (consumer.HeaderDLQ*).
const (
	hdrDLQReason    = "choreo_dlq_reason"
	hdrDLQTopic     = "choreo_dlq_topic"
	hdrDLQPartition = "choreo_dlq_partition"
	hdrDLQOffset    = "choreo_dlq_offset"
	hdrDLQGroup     = "choreo_dlq_group"
)

// deadLetters: every record of every .dlq topic is one of the poison records (by its
// chaos_poison_id header or by the original position it names), and every poison record
// is in a DLQ topic or in a dead-letter table of a service, with the expected reason.
func (c *checker) deadLetters(ctx context.Context, poison []poisonRecord) error {
	byPos := make(map[string]*poisonRecord)
	byID := make(map[string]*poisonRecord)
	for i := range poison {
		p := &poison[i]
		byPos[fmt.Sprintf("%s/%d/%d", p.Topic, p.Partition, p.Offset)] = p
		byID[p.ID] = p
	}
	found := make(map[string][]string) // poison id -> reasons seen
	for _, topic := range events.Topics {
		recs, err := c.s.readTopic(ctx, consumer.DeadLetterTopic(topic))
		if err != nil {
			return err
		}
		c.dlq += len(recs)
		for _, rec := range recs {
			reason := header(rec, hdrDLQReason)
			pos := fmt.Sprintf("%s/%s/%s", header(rec, hdrDLQTopic), header(rec, hdrDLQPartition), header(rec, hdrDLQOffset))
			p := byID[header(rec, hdrPoisonID)]
			if p == nil {
				p = byPos[pos]
			}
			if p == nil {
				c.add(InvDLQ, string(rec.Key), "%s[%d]@%d: %s from %s (group %s), type %s, dup %v",
					rec.Topic, rec.Partition, rec.Offset, reason, pos, header(rec, hdrDLQGroup), header(rec, "ce_type"), header(rec, hdrDup) != "")
				continue
			}
			found[p.ID] = append(found[p.ID], reason)
		}
	}
	archived, err := c.archived(ctx, poison)
	if err != nil {
		return err
	}
	for _, p := range poison {
		reasons := append(found[p.ID], archived[p.ID]...)
		switch {
		case len(reasons) == 0:
			c.add(InvPoison, p.Key, "%s record %s[%d]@%d (%d bytes) is in no DLQ topic and no dead-letter table", p.Kind, p.Topic, p.Partition, p.Offset, p.Size)
		case slices.ContainsFunc(reasons, func(r string) bool { return r != p.Reason }):
			c.add(InvPoison, p.Key, "%s record %s[%d]@%d dead-lettered with reason(s) %v, want %s", p.Kind, p.Topic, p.Partition, p.Offset, reasons, p.Reason)
		}
	}
	return nil
}

// archived finds poison records in the services' dead-letter tables (any table whose
// name contains "dead_letter"), by their poison id or their original position, and
// returns the reasons recorded there.
func (c *checker) archived(ctx context.Context, poison []poisonRecord) (map[string][]string, error) {
	out := make(map[string][]string)
	if len(poison) == 0 {
		return out, nil
	}
	for _, svc := range services {
		rows, err := c.pools[svc].Query(ctx, `SELECT table_name FROM information_schema.tables
			WHERE table_schema = current_schema() AND table_name LIKE '%dead_letter%'`)
		if err != nil {
			return nil, fmt.Errorf("chaos: list %s tables: %w", svc, err)
		}
		tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return nil, fmt.Errorf("chaos: list %s tables: %w", svc, err)
		}
		for _, t := range tables {
			rows, err := c.pools[svc].Query(ctx, "SELECT row_to_json(t)::text FROM "+pgx.Identifier{t}.Sanitize()+" t")
			if err != nil {
				return nil, fmt.Errorf("chaos: read %s.%s: %w", svc, t, err)
			}
			texts, err := pgx.CollectRows(rows, pgx.RowTo[string])
			if err != nil {
				return nil, fmt.Errorf("chaos: read %s.%s: %w", svc, t, err)
			}
			for _, txt := range texts {
				for _, p := range poison {
					if reason, ok := archivedAs(txt, p); ok {
						out[p.ID] = append(out[p.ID], reason)
					}
				}
			}
		}
	}
	return out, nil
}

// noDeadline: no order was cancelled by its saga deadline (the overload scenario: a
// backlog alone must not cancel orders).
func (c *checker) noDeadline(ctx context.Context, since time.Time) error {
	rows, err := c.pools["order"].Query(ctx, `SELECT DISTINCT h.order_id::text FROM order_history h JOIN orders o ON o.id = h.order_id
		WHERE h.cause_event_type = $1 AND NOT h.ignored AND o.created_at >= $2`, string(ordersvc.CmdSagaTimeout), since)
	if err != nil {
		return fmt.Errorf("chaos: read order history: %w", err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return fmt.Errorf("chaos: read order history: %w", err)
	}
	for _, id := range ids {
		c.add(InvNoDeadline, id, "cancelled by its saga deadline")
	}
	return nil
}

// progress is a snapshot of how far the system is from quiescence.
type progress struct {
	open   int   // orders not settled for good (COMPENSATION_FAILED can still heal)
	outbox int64 // rows in the outboxes
	lag    int64 // records not yet consumed, over every group
	orders int   // orders in total
}

func (p progress) quiet() bool { return p.open == 0 && p.outbox == 0 && p.lag == 0 }

func (p progress) String() string {
	return fmt.Sprintf("%d orders, %d open, %d outbox rows, lag %d", p.orders, p.open, p.outbox, p.lag)
}

// progress reads the open orders, outbox rows and consumer lag.
func (s *System) progress(ctx context.Context, pools map[string]*pgxpool.Pool) (progress, error) {
	var p progress
	if err := pools["order"].QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE state IN ('PENDING', 'CANCELLING', 'COMPENSATION_FAILED')) FROM orders`).Scan(&p.orders, &p.open); err != nil {
		return p, err
	}
	for _, svc := range services {
		var n int64
		if err := pools[svc].QueryRow(ctx, "SELECT count(*) FROM choreo_outbox").Scan(&n); err != nil {
			return p, err
		}
		p.outbox += n
	}
	groups, err := s.groups(ctx)
	if err != nil {
		return p, err
	}
	lags, err := s.adm.Lag(ctx, groups...)
	if err != nil {
		return p, err
	}
	for _, l := range lags {
		if l.Error() != nil {
			return p, l.Error()
		}
		p.lag += l.Lag.Total()
	}
	return p, nil
}

// archivedAs reports whether row, a dead-letter table row as JSON (row_to_json), archives
// the poison record p — by its topic, partition and offset, or by a chaos_poison_id
// header — and returns the reason it records ("" if none).
func archivedAs(row string, p poisonRecord) (string, bool) {
	var r struct {
		Topic     string `json:"topic"`
		Partition *int32 `json:"partition"`
		Offset    *int64 `json:"offset"`
		Reason    string `json:"reason"`
		Headers   []struct {
			Key   string `json:"key"`
			Value []byte `json:"value"` // base64 in the archive's jsonb
		} `json:"headers"`
	}
	if json.Unmarshal([]byte(row), &r) != nil {
		return "", false
	}
	match := r.Topic == p.Topic && r.Partition != nil && *r.Partition == p.Partition && r.Offset != nil && *r.Offset == p.Offset
	for _, h := range r.Headers {
		match = match || h.Key == hdrPoisonID && string(h.Value) == p.ID
	}
	return r.Reason, match
}
