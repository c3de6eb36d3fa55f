package main

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
)

// cmdOrder prints one order: state, timeline, trace id and Jaeger link; "order
// retry-compensation <id>" re-sends an order's cancellation instead.
func cmdOrder(ctx context.Context, args []string, std stdio) error {
	if len(args) > 0 && args[0] == "retry-compensation" {
		return cmdRetryCompensation(ctx, args[1:], std)
	}
	var c conn
	fs := newFlagSet("order", std, &c)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: sagactl order <id> [flags]\n       sagactl order retry-compensation <id> [flags]\n\n"+
			"Shows an order's state, its transitions with the events that caused them, its trace id and Jaeger link.\n"+
			"retry-compensation re-sends the cancellation of a CANCELLING or COMPENSATION_FAILED order.\n\nFlags:")
		fs.PrintDefaults()
	}
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 && pos[0] == "retry-compensation" { // flags came first ("sagactl -json order retry-compensation <id>")
		return retryCompensation(ctx, c, pos[1:], std)
	}
	if len(pos) != 1 {
		return fmt.Errorf("%w: order takes exactly one order id", errUsage)
	}
	api, err := c.orderAPI()
	if err != nil {
		return err
	}
	o, err := api.Get(ctx, pos[0])
	if err != nil {
		return err
	}
	if c.json {
		return writeJSON(std.out, o)
	}
	return renderOrder(std.out, o, time.Now())
}

// cmdRetryCompensation re-sends the cancellation of an order that is CANCELLING or
// COMPENSATION_FAILED (POST /orders/{id}/retry-compensation) and prints the order.
func cmdRetryCompensation(ctx context.Context, args []string, std stdio) error {
	var c conn
	fs := newFlagSet("order retry-compensation", std, &c)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: sagactl order retry-compensation <id> [flags]\n\n"+
			"Re-sends the cancellation (order.cancel_requested) of an order that is CANCELLING or COMPENSATION_FAILED;\n"+
			"a COMPENSATION_FAILED order becomes CANCELLING again with a new deadline. Payment and inventory\n"+
			"refund and release at most once per order, so a retry is always safe. Any other state: exit 1.\n\nFlags:")
		fs.PrintDefaults()
	}
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	return retryCompensation(ctx, c, pos, std)
}

func retryCompensation(ctx context.Context, c conn, pos []string, std stdio) error {
	if len(pos) != 1 {
		return fmt.Errorf("%w: order retry-compensation takes exactly one order id", errUsage)
	}
	api, err := newOrderAPI(c.orderURL, c.timeout)
	if err != nil {
		return err
	}
	o, err := api.RetryCompensation(ctx, pos[0])
	if err != nil {
		return err
	}
	if c.json {
		return writeJSON(std.out, o)
	}
	_, err = printf(std.out, "cancellation re-sent for order %s: %s, attempt %d, deadline %s\n"+
		"follow it with: sagactl order %s\n", o.ID, o.State, o.CompensationAttempts, fmtDeadline(o.DeadlineAt), o.ID)
	return err
}

func fmtDeadline(t *time.Time) string {
	if t == nil {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

// renderOrder writes the human view of one order.
func renderOrder(w io.Writer, o Order, now time.Time) error {
	var b strings.Builder
	stuck := ""
	if o.Stuck {
		stuck = "  (STUCK)"
	}
	printf(&b, "order     %s\n", o.ID)
	printf(&b, "state     %s%s\n", o.State, stuck)
	if o.CompensationAttempts > 1 {
		printf(&b, "attempts  cancellation sent %d times\n", o.CompensationAttempts)
	}
	if o.Reason != "" {
		printf(&b, "reason    %s\n", o.Reason)
	}
	if o.Payment != "" || o.Stock != "" {
		printf(&b, "payment   %s   stock %s\n", orDash(o.Payment), orDash(o.Stock))
	}
	printf(&b, "customer  %s\n", o.CustomerID)
	printf(&b, "amount    %s\n", fmtAmount(o.Amount))
	printf(&b, "items     %s\n", fmtItems(o.Items))
	if !o.CreatedAt.IsZero() {
		printf(&b, "created   %s (%s ago)\n", o.CreatedAt.UTC().Format(time.RFC3339Nano), fmtAge(now.Sub(o.CreatedAt)))
	}
	if d, ok := o.SettledIn(); ok {
		printf(&b, "settled   in %s\n", fmtDuration(d))
	} else if o.DeadlineAt != nil {
		printf(&b, "deadline  %s (in %s; then it is cancelled)\n", o.DeadlineAt.UTC().Format(time.RFC3339), fmtAge(o.DeadlineAt.Sub(now)))
	}
	if w := o.waitingOn(); w != "" {
		printf(&b, "waiting   %s\n", w)
	}
	printf(&b, "trace id  %s\n", orDash(o.TraceID))
	printf(&b, "jaeger    %s\n", orDash(o.JaegerURL))
	if u := jaegerSearchURL(o); u != "" {
		printf(&b, "search    %s\n", u)
	}
	b.WriteString("\n")
	if _, err := io.WriteString(w, b.String()); err != nil {
		return fmt.Errorf("sagactl: write: %w", err)
	}
	t := newTable("AT", "+", "FROM", "TO", "CAUSE", "CAUSE EVENT ID", "NOTE").right(1)
	for _, h := range o.History {
		since := "-"
		if !o.CreatedAt.IsZero() && !h.At.IsZero() {
			since = fmtDuration(h.At.Sub(o.CreatedAt))
		}
		to, note := h.To, h.Note
		if h.Ignored {
			to = "(stays " + h.From + ")"
			note = strings.TrimSpace("ignored " + note)
		}
		t.add(h.At.UTC().Format("2006-01-02T15:04:05.000Z"), since, orDash(h.From), to,
			orDash(h.CauseEventType), orDash(h.CauseEventID), note)
	}
	if len(o.History) == 0 {
		t.add("-", "-", "-", o.State, "(no transitions recorded)", "-", "")
	}
	return t.render(w)
}

// waitingOn says, for an order that has not settled, which service's answer the saga is
// waiting for, from the payment and stock statuses the order service reports.
func (o Order) waitingOn() string {
	switch {
	case o.State == "COMPENSATION_FAILED":
		return "for an operator: the missing refund or release still completes it; re-send with sagactl order retry-compensation " + o.ID
	case terminal(o.State):
		return ""
	case o.State == "PENDING" && (o.Payment == "" || o.Payment == "none"):
		return "for payment to answer order.created (payment.authorized or payment.declined)"
	case o.State == "PENDING" && o.Payment == "authorized" && (o.Stock == "" || o.Stock == "none"):
		return "for inventory to answer payment.authorized (stock.reserved or stock.unavailable)"
	case o.State == "PENDING" && o.Stock == "unavailable" && o.Payment == "authorized":
		return "for payment to refund after stock.unavailable (payment.refunded)"
	case o.State == "CANCELLING":
		var parts []string
		if o.Payment != "declined" && o.Payment != "refunded" {
			parts = append(parts, "payment to refund or decline (payment.refunded / payment.declined)")
		}
		if o.Stock != "released" && o.Stock != "unavailable" && o.Payment != "declined" {
			parts = append(parts, "inventory to release stock (stock.released)")
		}
		if len(parts) > 0 {
			return "for " + strings.Join(parts, " and ")
		}
	}
	return ""
}

// jaegerSearchURL is a Jaeger UI search for the order's spans by its order.id tag,
// derived from the trace link the service returned ("" when there is none).
func jaegerSearchURL(o Order) string {
	base, _, ok := strings.Cut(o.JaegerURL, "/trace/")
	if !ok || base == "" || o.ID == "" {
		return ""
	}
	tags, _ := json.Marshal(map[string]string{"order.id": o.ID})
	return base + "/search?" + url.Values{"service": {"order"}, "tags": {string(tags)}}.Encode()
}

// cmdStuck lists stuck orders, oldest first.
func cmdStuck(ctx context.Context, args []string, std stdio) error {
	var c conn
	fs := newFlagSet("stuck", std, &c)
	olderThan := new(time.Duration)
	durationVar(fs, olderThan, "older-than", 0, "only orders older than this `duration` (e.g. 5m; 0: every stuck order)")
	limit := fs.Int("limit", 100, "at most this many orders")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: sagactl stuck [flags]\n\nLists orders past their state's deadline, oldest first, with state, age, trace id and Jaeger link.\n\nFlags:")
		fs.PrintDefaults()
	}
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 0 {
		return fmt.Errorf("%w: stuck takes no arguments, got %q", errUsage, pos)
	}
	if *olderThan < 0 || *limit < 1 {
		return fmt.Errorf("%w: -older-than must be >= 0 and -limit >= 1", errUsage)
	}
	api, err := c.orderAPI()
	if err != nil {
		return err
	}
	q := url.Values{"stuck": {"true"}, "limit": {strconv.Itoa(*limit)}}
	if *olderThan > 0 {
		q.Set("older_than", olderThan.String())
	}
	orders, err := api.List(ctx, q)
	if err != nil {
		return err
	}
	now := time.Now()
	orders = slices.DeleteFunc(orders, func(o Order) bool { return o.Age(now) < *olderThan })
	slices.SortStableFunc(orders, func(a, b Order) int { return cmp.Compare(b.Age(now), a.Age(now)) })
	if c.json {
		if orders == nil {
			orders = []Order{}
		}
		return writeJSON(std.out, struct {
			Orders []Order `json:"orders"`
		}{orders})
	}
	return renderStuck(std.out, orders, now)
}

func renderStuck(w io.Writer, orders []Order, now time.Time) error {
	if len(orders) == 0 {
		_, err := fmt.Fprintln(w, "no stuck orders")
		return err
	}
	t := newTable("ORDER", "STATE", "AGE", "CUSTOMER", "TRACE ID", "JAEGER").right(2)
	for _, o := range orders {
		t.add(o.ID, o.State, fmtAge(o.Age(now)), o.CustomerID, orDash(o.TraceID), orDash(o.JaegerURL))
	}
	if err := t.render(w); err != nil {
		return err
	}
	_, err := printf(w, "\n%d stuck; inspect one with: sagactl order %s\n", len(orders), orders[0].ID)
	return err
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// fmtAmount prints cents as units with two decimals.
func fmtAmount(cents int64) string {
	sign := ""
	if cents < 0 {
		sign, cents = "-", -cents
	}
	return fmt.Sprintf("%s%d.%02d", sign, cents/100, cents%100)
}

func fmtItems(items []Item) string {
	if len(items) == 0 {
		return "-"
	}
	parts := make([]string, len(items))
	for i, it := range items {
		parts[i] = fmt.Sprintf("%s x%d", it.SKU, it.Qty)
	}
	return strings.Join(parts, ", ")
}
