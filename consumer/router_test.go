package consumer

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/choreo-saga/choreo/event"
)

func TestRouter(t *testing.T) {
	var got []string
	handler := func(name string) TxHandler {
		return func(_ context.Context, _ pgx.Tx, ev event.Event) error {
			got = append(got, name+":"+ev.Type)
			return nil
		}
	}
	r := NewRouter().
		Handle("order.created", handler("created")).
		Handle("order.cancelled", handler("cancelled")).
		Ignore("order.viewed")
	if !slices.Equal(r.Types(), []string{"order.cancelled", "order.created"}) {
		t.Errorf("Types() = %v", r.Types())
	}
	tests := []struct {
		typ         string
		wantErr     error
		wantOutcome Outcome
		wantCall    string
	}{
		{"order.created", nil, "", "created:order.created"},
		{"order.cancelled", nil, "", "cancelled:order.cancelled"},
		{"order.viewed", nil, OutcomeIgnored, ""},
		{"order.teleported", ErrUnknownType, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.typ, func(t *testing.T) {
			got = nil
			m := &Message{Event: event.Event{Type: tt.typ}, Decoded: true}
			// Filter in front of a terminal handler that routes, as Standard wires it.
			err := r.Filter()(func(ctx context.Context, m *Message) error {
				return r.Route(ctx, nil, m.Event)
			})(context.Background(), m)
			if !errors.Is(err, tt.wantErr) || (tt.wantErr == nil && err != nil) {
				t.Fatalf("err %v, want %v", err, tt.wantErr)
			}
			if m.Outcome != tt.wantOutcome {
				t.Errorf("outcome %q, want %q", m.Outcome, tt.wantOutcome)
			}
			if want := []string{tt.wantCall}; tt.wantCall != "" && !slices.Equal(got, want) || tt.wantCall == "" && got != nil {
				t.Errorf("calls %v, want %q", got, tt.wantCall)
			}
			if tt.wantErr != nil && (Retryable(err) || Reason(err) != ReasonUnknownType) {
				t.Errorf("unknown type: retryable %v, reason %q", Retryable(err), Reason(err))
			}
			// Route alone agrees with Filter.
			rerr := r.Route(context.Background(), nil, m.Event)
			if !errors.Is(rerr, tt.wantErr) || (tt.wantErr == nil && rerr != nil) {
				t.Errorf("Route: %v", rerr)
			}
		})
	}
}

func TestRouterRejectsDoubleRegistration(t *testing.T) {
	h := func(context.Context, pgx.Tx, event.Event) error { return nil }
	for name, f := range map[string]func(){
		"handle twice":   func() { NewRouter().Handle("a", h).Handle("a", h) },
		"ignore routed":  func() { NewRouter().Handle("a", h).Ignore("a") },
		"handle ignored": func() { NewRouter().Ignore("a").Handle("a", h) },
		"nil handler":    func() { NewRouter().Handle("a", nil) },
	} {
		t.Run(name, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Error("no panic")
				}
			}()
			f()
		})
	}
}

// HandleOn routes a type from its topic only; IgnoreUnknown settles every type that is
// not routed (also a routed type on another topic) as ignored instead of failing it.
func TestRouterHandleOnAndIgnoreUnknown(t *testing.T) {
	var calls int
	h := func(context.Context, pgx.Tx, event.Event) error { calls++; return nil }
	filter := func(r *Router, topic, typ string) (*Message, error) {
		m := &Message{Record: &kgo.Record{Topic: topic}, Event: event.Event{Type: typ}, Decoded: true}
		err := r.Filter()(func(ctx context.Context, m *Message) error { return r.Route(ctx, nil, m.Event) })(context.Background(), m)
		return m, err
	}
	strict := NewRouter().HandleOn("orders", "order.confirmed", h)
	if _, err := filter(strict, "orders", "order.confirmed"); err != nil || calls != 1 {
		t.Fatalf("on its topic: err %v, %d calls", err, calls)
	}
	if _, err := filter(strict, "returns", "order.confirmed"); !errors.Is(err, ErrUnknownType) || calls != 1 {
		t.Errorf("on another topic: err %v, %d calls; want ErrUnknownType and no call", err, calls)
	}
	// A record replayed to the group's retry topic is routed as a record of its base topic.
	m := &Message{Record: &kgo.Record{Topic: RetryTopic("orders", "g")}, Group: "g", Event: event.Event{Type: "order.confirmed"}, Decoded: true}
	if err := strict.Filter()(func(ctx context.Context, m *Message) error { return strict.Route(ctx, nil, m.Event) })(context.Background(), m); err != nil || calls != 2 {
		t.Fatalf("from the retry topic: err %v, %d calls", err, calls)
	}
	lax := NewRouter().HandleOn("orders", "order.confirmed", h).IgnoreUnknown()
	for _, in := range [][2]string{{"returns", "order.confirmed"}, {"orders", "order.teleported"}} {
		m, err := filter(lax, in[0], in[1])
		if err != nil || m.Outcome != OutcomeIgnored || calls != 2 {
			t.Errorf("%s on %s: err %v, outcome %q, %d calls; want ignored", in[1], in[0], err, m.Outcome, calls)
		}
	}
}
