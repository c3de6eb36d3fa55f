package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestTableRender(t *testing.T) {
	tb := newTable("NAME", "COUNT", "NOTE").right(1)
	tb.add("confirmed", "140", "ok")
	tb.add("rejected (payment.declined)", "7")
	tb.add("x", "12345", "first line\nsecond line", "dropped extra cell")
	var b bytes.Buffer
	if err := tb.render(&b); err != nil {
		t.Fatal(err)
	}
	want := "" +
		"NAME                         COUNT  NOTE\n" +
		"confirmed                      140  ok\n" +
		"rejected (payment.declined)      7\n" +
		"x                            12345  first line\\u000asecond line\n"
	if b.String() != want {
		t.Errorf("render:\n%s\nwant:\n%s", b.String(), want)
	}
}

func TestTableRenderUnicodeWidth(t *testing.T) {
	tb := newTable("A", "B")
	tb.add("ü…", "x")
	tb.add("abc", "y")
	var b bytes.Buffer
	if err := tb.render(&b); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
	for _, l := range lines {
		if got := len([]rune(l)); got != 6 {
			t.Errorf("line %q is %d runes, want 6 (columns aligned by runes)", l, got)
		}
	}
}

func TestTruncate(t *testing.T) {
	tests := []struct {
		in   string
		n    int
		want string
	}{
		{"short", 10, "short"},
		{"exactly10!", 10, "exactly10!"},
		{"longer than ten", 10, "longer th…"},
		{"ääääää", 3, "ää…"},
		{"anything", 0, "anything"},
	}
	for _, tt := range tests {
		if got := truncate(tt.in, tt.n); got != tt.want {
			t.Errorf("truncate(%q, %d) = %q, want %q", tt.in, tt.n, got, tt.want)
		}
	}
}

func TestPercentile(t *testing.T) {
	ms := func(vs ...int) []time.Duration {
		out := make([]time.Duration, len(vs))
		for i, v := range vs {
			out[i] = time.Duration(v) * time.Millisecond
		}
		return out
	}
	hundred := make([]time.Duration, 100)
	for i := range hundred {
		hundred[99-i] = time.Duration(i+1) * time.Millisecond // 100..1, unsorted on purpose
	}
	tests := []struct {
		name string
		ds   []time.Duration
		p    float64
		want time.Duration
	}{
		{"empty", nil, 50, 0},
		{"one", ms(7), 99, 7 * time.Millisecond},
		{"p50 of 1..100", hundred, 50, 50 * time.Millisecond},
		{"p95 of 1..100", hundred, 95, 95 * time.Millisecond},
		{"p99 of 1..100", hundred, 99, 99 * time.Millisecond},
		{"p100 of 1..100", hundred, 100, 100 * time.Millisecond},
		{"p50 of four is the 2nd", ms(40, 10, 30, 20), 50, 20 * time.Millisecond},
		{"p99 of four is the max", ms(40, 10, 30, 20), 99, 40 * time.Millisecond},
		{"tiny p is the min", ms(40, 10, 30, 20), 0.1, 10 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := append([]time.Duration(nil), tt.ds...)
			if got := percentile(tt.ds, tt.p); got != tt.want {
				t.Errorf("percentile(p%v) = %v, want %v", tt.p, got, tt.want)
			}
			for i := range in {
				if in[i] != tt.ds[i] {
					t.Fatal("percentile modified its input")
				}
			}
		})
	}
	l := summarize(hundred)
	if l.N != 100 || l.P50ms != 50 || l.P95ms != 95 || l.P99ms != 99 {
		t.Errorf("summarize = %+v", l)
	}
}

func TestFormatting(t *testing.T) {
	tests := []struct{ got, want string }{
		{fmtLatency(0, 0), "-"},
		{fmtLatency(1500*time.Microsecond, 1), "1.5ms"},
		{fmtLatency(155808*time.Microsecond, 1), "155ms"},
		{fmtLatency(2500*time.Millisecond, 1), "2.5s"},
		{fmtDuration(42 * time.Second), "42s"},
		{fmtDuration(time.Minute + 45121541*time.Microsecond), "1m45s"},
		{fmtDuration(12*time.Minute + 400*time.Millisecond), "12m00s"},
		{fmtDuration(-1500 * time.Millisecond), "-1.5s"},
		{fmtAge(-time.Second), "0s"},
		{fmtAge(42 * time.Second), "42s"},
		{fmtAge(4*time.Minute + 5*time.Second), "4m05s"},
		{fmtAge(3*time.Hour + 2*time.Minute), "3h02m"},
		{fmtAge(52 * time.Hour), "2d04h"},
		{fmtAmount(4200), "42.00"},
		{fmtAmount(5), "0.05"},
		{fmtAmount(-150), "-1.50"},
		{fmtItems([]Item{{"sku-1", 2}, {"sku-rare", 1}}), "sku-1 x2, sku-rare x1"},
		{fmtItems(nil), "-"},
	}
	for i, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("case %d: got %q, want %q", i, tt.got, tt.want)
		}
	}
}

func TestParseMix(t *testing.T) {
	tests := []struct {
		in      string
		want    string // mix.String()
		wantErr string
	}{
		{defaultMix, "success=70,decline=10,oos=10,cancel=10,stuck=1", ""},
		{" Success = 1 , stuck=0 ", "success=1,decline=0,oos=0,cancel=0,stuck=0", ""},
		{"success=0.5,oos=0.25", "success=0.5,decline=0,oos=0.25,cancel=0,stuck=0", ""},
		{"", "success=0,decline=0,oos=0,cancel=0,stuck=0", ""},
		{"success", "", "not kind=value"},
		{"refund=3", "", "unknown kind"},
		{"success=1,success=2", "", "given twice"},
		{"success=-1", "", "weight >= 0"},
		{"success=NaN", "", "weight >= 0"},
		{"stuck=1.5", "", "number of orders"},
		{"stuck=-1", "", "number of orders"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			m, err := parseMix(tt.in)
			if tt.wantErr != "" {
				if err == nil || !errors.Is(err, errBadMix) || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want errBadMix mentioning %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := m.String(); got != tt.want {
				t.Errorf("String() = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestMixCounts(t *testing.T) {
	tests := []struct {
		mix     string
		n       int
		want    map[kind]int
		wantErr bool
	}{
		// The demo: exactly one stuck order, the rest split 70/10/10/10.
		{defaultMix, 200, map[kind]int{kindSuccess: 139, kindDecline: 20, kindOOS: 20, kindCancel: 20, kindStuck: 1}, false},
		{defaultMix, 1, map[kind]int{kindStuck: 1}, false},
		{"success=1,decline=1,oos=1", 10, map[kind]int{kindSuccess: 4, kindDecline: 3, kindOOS: 3}, false},
		{"success=2,decline=1", 4, map[kind]int{kindSuccess: 3, kindDecline: 1}, false},
		{"cancel=1", 5, map[kind]int{kindCancel: 5}, false},
		{"stuck=3", 3, map[kind]int{kindStuck: 3}, false},
		{"stuck=3", 4, nil, true}, // one order has no weighted kind to go to
		{"success=1,stuck=5", 4, nil, true},
		{"success=1", 0, nil, true},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%s/n=%d", tt.mix, tt.n), func(t *testing.T) {
			m, err := parseMix(tt.mix)
			if err != nil {
				t.Fatal(err)
			}
			got, err := m.counts(tt.n)
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, wantErr %v", err, tt.wantErr)
			}
			if tt.wantErr {
				return
			}
			sum := 0
			for _, k := range kinds {
				sum += got[k]
				if got[k] != tt.want[k] {
					t.Errorf("%s = %d, want %d (all: %v)", k, got[k], tt.want[k], got)
				}
			}
			if sum != tt.n {
				t.Errorf("counts add up to %d, want %d", sum, tt.n)
			}
		})
	}
}

func TestMixPlanIsAShuffleOfCounts(t *testing.T) {
	m, err := parseMix(defaultMix)
	if err != nil {
		t.Fatal(err)
	}
	a, err := m.plan(200, rand.New(rand.NewPCG(1, 2)))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := m.plan(200, rand.New(rand.NewPCG(1, 2)))
	c, _ := m.plan(200, rand.New(rand.NewPCG(3, 4)))
	if fmt.Sprint(a) != fmt.Sprint(b) {
		t.Error("the same seed gave different plans")
	}
	if fmt.Sprint(a) == fmt.Sprint(c) {
		t.Error("different seeds gave the same plan")
	}
	got := make(map[kind]int)
	for _, k := range a {
		got[k]++
	}
	want, _ := m.counts(200)
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("plan has %v, want %v", got, want)
	}
}

func TestLoadRequestsByKind(t *testing.T) {
	lc := loadConfig{customers: 100, skus: []string{"sku-1", "sku-2"}, poor: "c-poor", hang: "c-hang", rare: "sku-rare"}
	rng := rand.New(rand.NewPCG(9, 9))
	for range 50 {
		r := lc.request(kindSuccess, rng)
		var n int
		if _, err := fmt.Sscanf(r.CustomerID, "c-%d", &n); err != nil || n < 1 || n > 100 {
			t.Fatalf("success customer %q not in c-1..c-100", r.CustomerID)
		}
		if len(r.Items) != 1 || (r.Items[0].SKU != "sku-1" && r.Items[0].SKU != "sku-2") || r.Items[0].Qty < 1 || r.Amount <= 0 {
			t.Fatalf("success request %+v", r)
		}
	}
	if r := lc.request(kindDecline, rng); r.CustomerID != "c-poor" {
		t.Errorf("decline customer %q", r.CustomerID)
	}
	if r := lc.request(kindOOS, rng); r.Items[0].SKU != "sku-rare" {
		t.Errorf("oos sku %q", r.Items[0].SKU)
	}
	if r := lc.request(kindStuck, rng); r.CustomerID != "c-hang" {
		t.Errorf("stuck customer %q", r.CustomerID)
	}
}

func TestParseInterspersed(t *testing.T) {
	tests := []struct {
		args    []string
		pos     string
		json    bool
		wantErr bool
	}{
		{[]string{"id-1"}, "[id-1]", false, false},
		{[]string{"id-1", "-json"}, "[id-1]", true, false},
		{[]string{"-json", "id-1"}, "[id-1]", true, false},
		{[]string{"a", "-json", "b"}, "[a b]", true, false},
		{[]string{"--", "-json"}, "[-json]", false, false},
		{[]string{"a", "--", "-json"}, "[a -json]", false, false},
		{[]string{"-nope"}, "", false, true},
	}
	for _, tt := range tests {
		var c conn
		fs := newFlagSet("x", stdio{err: io.Discard, getenv: func(string) string { return "" }}, &c)
		pos, err := parse(fs, tt.args)
		if (err != nil) != tt.wantErr {
			t.Fatalf("%q: err = %v", tt.args, err)
		}
		if tt.wantErr {
			if !errors.Is(err, errUsage) {
				t.Errorf("%q: err %v is not a usage error", tt.args, err)
			}
			continue
		}
		if fmt.Sprint(pos) != tt.pos || c.json != tt.json {
			t.Errorf("%q: pos %v json %v, want %s %v", tt.args, pos, c.json, tt.pos, tt.json)
		}
	}
}

func TestHoistGlobalFlags(t *testing.T) {
	std := stdio{err: io.Discard, getenv: func(string) string { return "" }}
	tests := []struct {
		in, want []string
		wantErr  bool
	}{
		{[]string{"load", "-n", "5"}, []string{"load", "-n", "5"}, false},
		{[]string{"--order-url", "http://x:1", "load", "-n", "5"}, []string{"load", "--order-url", "http://x:1", "-n", "5"}, false},
		{[]string{"-json", "-brokers=k:9092", "dlq", "list"}, []string{"dlq", "-json", "-brokers=k:9092", "list"}, false},
		{[]string{"-timeout", "3s", "--", "order", "id"}, []string{"order", "-timeout", "3s", "id"}, false},
		{[]string{"--help"}, []string{"--help"}, false},
		{[]string{"-json"}, nil, false},
		{[]string{"-n", "5", "load"}, nil, true}, // -n is load's, not global
	}
	for _, tt := range tests {
		got, err := hoistGlobalFlags(tt.in, std)
		if (err != nil) != tt.wantErr || fmt.Sprint(got) != fmt.Sprint(tt.want) {
			t.Errorf("hoist(%q) = %q, %v; want %q (err %v)", tt.in, got, err, tt.want, tt.wantErr)
		}
	}
}

func TestConnFlagsFromEnv(t *testing.T) {
	env := map[string]string{"ORDER_URL": "http://order:8080", "KAFKA_BROKERS": "kafka:9092"}
	var c conn
	fs := newFlagSet("x", stdio{err: io.Discard, getenv: func(k string) string { return env[k] }}, &c)
	if _, err := parse(fs, nil); err != nil {
		t.Fatal(err)
	}
	if c.orderURL != "http://order:8080" || c.brokers != "kafka:9092" {
		t.Errorf("env ignored: %+v", c)
	}
	fs = newFlagSet("x", stdio{err: io.Discard, getenv: func(k string) string { return env[k] }}, &c)
	if _, err := parse(fs, []string{"-order-url", "http://x:1"}); err != nil || c.orderURL != "http://x:1" {
		t.Errorf("flag does not override env: %+v, %v", c, err)
	}
}

func TestExitCodes(t *testing.T) {
	refused := fmt.Errorf("wrapped: %w", &net.OpError{Op: "dial", Err: syscall.ECONNREFUSED})
	tests := []struct {
		err  error
		want int
	}{
		{nil, exitOK},
		{errors.New("boom"), exitFailure},
		{fmt.Errorf("%w: bad flag", errUsage), exitUsage},
		{fmt.Errorf("%w: order service: %w", errUnreachable, refused), exitUnreachable},
		{fmt.Errorf("x: %w", errNotFound), exitFailure},
		{flag.ErrHelp, exitFailure}, // run turns ErrHelp into 0 before exitCode
	}
	for _, tt := range tests {
		if got := exitCode(tt.err); got != tt.want {
			t.Errorf("exitCode(%v) = %d, want %d", tt.err, got, tt.want)
		}
	}
	if !isConnError(refused) || !isConnError(&net.DNSError{Err: "no such host"}) || isConnError(errors.New("x")) {
		t.Error("isConnError misclassifies")
	}
}

func TestRunUsageAndUnreachable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String()
	ln.Close() // nothing listens here any more: connection refused
	tests := []struct {
		args []string
		want int
		msg  string
	}{
		{nil, exitUsage, "Usage:"},
		{[]string{"frobnicate"}, exitUsage, `unknown command "frobnicate"`},
		{[]string{"order"}, exitUsage, "exactly one order id"},
		{[]string{"order", "-order-url", "ftp://x", "id"}, exitUsage, "must be http(s)"},
		{[]string{"stuck", "-older-than", "-5m"}, exitUsage, "-older-than"},
		{[]string{"dlq"}, exitUsage, "needs a subcommand"},
		{[]string{"dlq", "show", "t", "zero"}, exitUsage, "partition:offset"},
		{[]string{"dlq", "replay", "t"}, exitUsage, "or pass -all"},
		{[]string{"dlq", "replay", "t", "0:1", "-all"}, exitUsage, "not both"},
		{[]string{"load", "-rate", "0"}, exitUsage, "-rate"},
		{[]string{"load", "-mix", "bogus=1"}, exitUsage, "unknown kind"},
		{[]string{"order", "-order-url", "http://" + closed, "some-id"}, exitUnreachable, "order service at http://" + closed},
		{[]string{"stuck", "-order-url", "http://" + closed}, exitUnreachable, "is it running?"},
		{[]string{"load", "-order-url", "http://" + closed, "-n", "1"}, exitUnreachable, "order service"},
		{[]string{"dlq", "list", "-brokers", closed, "-timeout", "2s"}, exitUnreachable, "kafka at " + closed},
		{[]string{"dlq", "list", "-brokers", closed, "-kafka-compression", "brotli"}, exitUsage, "-kafka-compression"},
		{[]string{"help"}, exitOK, ""},
		{[]string{"order", "-h"}, exitOK, ""},
		{[]string{"--order-url", "http://" + closed, "order", "some-id"}, exitUnreachable, "order service at http://" + closed},
		{[]string{"-n", "5", "load"}, exitUsage, "flag provided but not defined: -n"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			var out, errb bytes.Buffer
			code := run(context.Background(), tt.args, stdio{out: &out, err: &errb, getenv: func(string) string { return "" }})
			if code != tt.want {
				t.Fatalf("exit %d, want %d; stderr: %s", code, tt.want, errb.String())
			}
			if !strings.Contains(out.String()+errb.String(), tt.msg) {
				t.Errorf("output does not mention %q:\nstdout: %s\nstderr: %s", tt.msg, out.String(), errb.String())
			}
		})
	}
}

func TestAPIErrorDecoding(t *testing.T) {
	err := fmt.Errorf("sagactl: GET /orders/x: %w", &apiError{Status: http.StatusNotFound, Code: "not_found", Message: "no order x"})
	if !errors.Is(err, errNotFound) || !isAPICode(err, "not_found") || isAPICode(err, "internal") {
		t.Errorf("classification of %v", err)
	}
	if !strings.Contains(err.Error(), "HTTP 404 not_found: no order x") {
		t.Errorf("message %q", err)
	}
}

func TestOrderDerivedFields(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	o := Order{ID: "o1", State: "REJECTED", CreatedAt: t0, History: []Transition{
		{From: "", To: "PENDING", CauseEventType: "order.created", At: t0},
		{From: "PENDING", To: "REJECTED", CauseEventType: "payment.refunded", At: t0.Add(1500 * time.Millisecond)},
	}}
	if d, ok := o.SettledIn(); !ok || d != 1500*time.Millisecond {
		t.Errorf("SettledIn = %v, %v", d, ok)
	}
	if got := outcome(o); got != "REJECTED (payment.refunded)" {
		t.Errorf("outcome = %q", got)
	}
	p := Order{State: "PENDING", CreatedAt: t0}
	if _, ok := p.SettledIn(); ok {
		t.Error("a PENDING order is not settled")
	}
	if got := outcome(p); got != "IN FLIGHT (PENDING)" {
		t.Errorf("outcome = %q", got)
	}
	p.Stuck = true
	if got := outcome(p); got != "STUCK in PENDING" {
		t.Errorf("outcome of a flagged order = %q", got)
	}
	if got := p.Age(t0.Add(time.Minute)); got != time.Minute {
		t.Errorf("Age = %v", got)
	}
	if got := (Order{AgeSeconds: 90}).Age(t0); got != 90*time.Second {
		t.Errorf("Age from age_seconds = %v", got)
	}
	lo := &loadOrder{Kind: kindCancel, State: "CONFIRMED", CancelLate: true}
	if !lo.expected() {
		t.Error("a cancel that lost the race to CONFIRMED is expected")
	}
	lo = &loadOrder{Kind: kindSuccess, State: "REJECTED"}
	if lo.expected() {
		t.Error("a rejected success order is unexpected")
	}
}

func TestRenderOrder(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	o := Order{ID: "0193-abc", CustomerID: "c-1", Amount: 4200, Items: []Item{{"sku-1", 2}}, State: "CONFIRMED",
		CreatedAt: t0, TraceID: "4bf92f3577b34da6a3ce929d0e0e4736", JaegerURL: "http://localhost:16686/trace/4bf92f3577b34da6a3ce929d0e0e4736",
		History: []Transition{
			{From: "", To: "PENDING", CauseEventType: "order.created", CauseEventID: "e1", At: t0},
			{From: "PENDING", To: "CONFIRMED", CauseEventType: "stock.reserved", CauseEventID: "e3", At: t0.Add(42 * time.Millisecond)},
		}}
	var b bytes.Buffer
	if err := renderOrder(&b, o, t0.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"order     0193-abc", "state     CONFIRMED\n", "amount    42.00", "items     sku-1 x2",
		"(1m00s ago)", "settled   in 42ms", "trace id  4bf92f3577b34da6a3ce929d0e0e4736",
		"jaeger    http://localhost:16686/trace/4bf92f3577b34da6a3ce929d0e0e4736",
		"search    http://localhost:16686/search?service=order&tags=%7B%22order.id%22%3A%220193-abc%22%7D",
		"2026-01-02T03:04:05.042Z  42ms  PENDING  CONFIRMED  stock.reserved  e3",
		"2026-01-02T03:04:05.000Z    0s  -        PENDING    order.created   e1",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("missing %q in:\n%s", want, b.String())
		}
	}
}

func TestWaitingOn(t *testing.T) {
	tests := []struct {
		o    Order
		want string
	}{
		{Order{State: "CONFIRMED"}, ""},
		{Order{State: "PENDING", Payment: "none", Stock: "none"}, "for payment to answer order.created"},
		{Order{State: "PENDING", Payment: "authorized", Stock: "none"}, "for inventory to answer payment.authorized"},
		{Order{State: "PENDING", Payment: "authorized", Stock: "unavailable"}, "for payment to refund"},
		{Order{State: "CANCELLING", Payment: "authorized", Stock: "reserved"}, "payment to refund or decline (payment.refunded / payment.declined) and inventory to release"},
		{Order{State: "CANCELLING", Payment: "refunded", Stock: "reserved"}, "for inventory to release stock"},
		{Order{State: "CANCELLING", Payment: "declined", Stock: "none"}, ""},
	}
	for _, tt := range tests {
		got := tt.o.waitingOn()
		if (tt.want == "") != (got == "") || !strings.Contains(got, tt.want) {
			t.Errorf("%s payment=%s stock=%s: waiting %q, want %q", tt.o.State, tt.o.Payment, tt.o.Stock, got, tt.want)
		}
	}
}

func TestRenderStuck(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	var b bytes.Buffer
	if err := renderStuck(&b, nil, t0); err != nil || b.String() != "no stuck orders\n" {
		t.Errorf("empty: %q %v", b.String(), err)
	}
	b.Reset()
	orders := []Order{{ID: "o-old", State: "PENDING", AgeSeconds: 600, CustomerID: "c-hang", TraceID: "t1", JaegerURL: "http://j/trace/t1"}}
	if err := renderStuck(&b, orders, t0); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"ORDER", "o-old  PENDING  10m00s  c-hang    t1", "inspect one with: sagactl order o-old"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("missing %q in:\n%s", want, b.String())
		}
	}
}

func TestSummaryAndRender(t *testing.T) {
	t0 := time.Now().Add(-time.Minute)
	settled := func(id, state, cause string, d time.Duration) Order {
		return Order{ID: id, State: state, CreatedAt: t0, History: []Transition{
			{To: "PENDING", At: t0}, {From: "PENDING", To: state, CauseEventType: cause, At: t0.Add(d)}}}
	}
	r := &loadRun{cfg: loadConfig{mix: mix{weights: map[kind]float64{kindSuccess: 1}, stuck: 1}, rate: 10},
		placeElapsed: 2 * time.Second, settleElapsed: 4 * time.Second}
	add := func(k kind, o Order) {
		lo := &loadOrder{Kind: k, ID: o.ID, State: o.State, Final: o, settled: terminal(o.State)}
		r.orders = append(r.orders, lo)
		r.placed++
		if lo.settled {
			r.settled++
		}
	}
	for i := range 10 {
		add(kindSuccess, settled(fmt.Sprintf("s%d", i), "CONFIRMED", "stock.reserved", time.Duration(i+1)*10*time.Millisecond))
	}
	add(kindDecline, settled("d1", "REJECTED", "payment.declined", 5*time.Millisecond))
	add(kindSuccess, settled("s-bad", "REJECTED", "payment.refunded", 7*time.Millisecond))
	add(kindStuck, Order{ID: "h1", State: "PENDING", Stuck: true, CreatedAt: t0, TraceID: "trace-h1", JaegerURL: "http://j/trace/trace-h1"})
	r.orders = append(r.orders, &loadOrder{Kind: kindSuccess, PlaceErr: "HTTP 500"})
	r.failed++

	s := r.summary()
	if s.Placed != 13 || s.FailedToPlace != 1 || s.Settled != 12 || s.Unsettled != 0 {
		t.Errorf("counts: %+v", s)
	}
	if len(s.Outcomes) != 4 || s.Outcomes[0].Outcome != "CONFIRMED" || s.Outcomes[0].Count != 10 {
		t.Fatalf("outcomes: %+v", s.Outcomes)
	}
	if l := s.Outcomes[0].Latency; l.P50 != 50*time.Millisecond || l.P95 != 100*time.Millisecond || l.P99 != 100*time.Millisecond {
		t.Errorf("CONFIRMED latency %+v", l)
	}
	if s.Latency.N != 12 {
		t.Errorf("all latency over %d orders, want 12", s.Latency.N)
	}
	if len(s.Stuck) != 1 || s.Stuck[0].ID != "h1" || s.Stuck[0].TraceID != "trace-h1" || s.Stuck[0].Inspect != "sagactl order h1" {
		t.Errorf("stuck: %+v", s.Stuck)
	}
	if len(s.Unexpected) != 1 || s.Unexpected[0].ID != "s-bad" {
		t.Errorf("unexpected: %+v", s.Unexpected)
	}
	var b bytes.Buffer
	if err := renderSummary(&b, s); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"13 orders placed (1 failed) in 2.0s (6.5/s); 12 settled in 4.0s (3.0/s)",
		"OUTCOME", "P50", "P95", "P99",
		"CONFIRMED                        10   50ms  100ms  100ms",
		"REJECTED (payment.declined)",
		"STUCK in PENDING",
		"failed to place                   1",
		"all settled                      12",
		"place error: HTTP 500",
		"1 order(s) ended other than their kind aims for",
		"h1     stuck  PENDING  yes", "trace-h1  sagactl order h1",
		"trace of h1: http://j/trace/trace-h1",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("missing %q in:\n%s", want, b.String())
		}
	}
	if strings.Contains(b.String(), "behind") || s.BehindSchedule {
		t.Errorf("14 orders at 10/s placed in 2s reported as behind schedule:\n%s", b.String())
	}

	// Placing 14 orders at 10/s took 5s: the -concurrency bound held the rate back.
	r.placeElapsed, r.cfg.concurrency = 5*time.Second, 16
	s = r.summary()
	b.Reset()
	if err := renderSummary(&b, s); err != nil {
		t.Fatal(err)
	}
	if want := "note: placing ran behind -rate 10/s (2.8/s)"; !s.BehindSchedule || !strings.Contains(b.String(), want) {
		t.Errorf("behind schedule %v; missing %q in:\n%s", s.BehindSchedule, want, b.String())
	}
}

func TestProgress(t *testing.T) {
	var b bytes.Buffer
	clock := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	p := newProgress(&b, true, 10)
	p.now = func() time.Time { return clock }
	p.start = clock
	clock = clock.Add(1500 * time.Millisecond)
	p.update(counts{total: 10, placed: 10, settled: 5})
	if got := b.String(); got != "\r[###############...............] placed 10/10  settled 5  failed 0  1.5s" {
		t.Errorf("terminal progress %q", got)
	}
	// A shorter line covers the rest of the longer one with spaces, through the writer
	// run puts on stderr (which escapes ESC: no erase sequence).
	b.Reset()
	p.w = safeWriter{w: &b, keepCR: true}
	p.update(counts{total: 10, placed: 10, settled: 5, aging: 1})
	if got := b.String(); !strings.HasPrefix(got, "\rsettled 5/10; waiting") || !strings.HasSuffix(got, "1.5s     ") || strings.ContainsAny(got, "\x1b\\") {
		t.Errorf("terminal progress redrawn %q", got)
	}
	b.Reset()
	p = newProgress(&b, false, 10)
	p.now = func() time.Time { return clock }
	p.start = clock
	p.update(counts{total: 10, placed: 1})
	p.update(counts{total: 10, placed: 2}) // within plainEvery: not printed
	clock = clock.Add(plainEvery)
	p.update(counts{total: 10, placed: 3})
	p.finish(counts{total: 10, placed: 10, settled: 10})
	want := "placed 1/10  settled 0  failed 0  0s\nplaced 3/10  settled 0  failed 0  2s\nplaced 10/10  settled 10  failed 0  2s\n"
	if b.String() != want {
		t.Errorf("plain progress:\n%q\nwant\n%q", b.String(), want)
	}

	// Every other order settled: the line says what the run waits for.
	b.Reset()
	clock = clock.Add(plainEvery)
	p.update(counts{total: 10, placed: 10, settled: 9, aging: 1})
	if want := "settled 9/10; waiting for the stuck order to be flagged stuck  4s\n"; b.String() != want {
		t.Errorf("aging progress %q, want %q", b.String(), want)
	}
}

func TestSelfName(t *testing.T) {
	for arg0, want := range map[string]string{
		"sagactl":                           "sagactl",
		"bin/sagactl":                       "bin/sagactl",
		"/usr/local/bin/sagactl":            "/usr/local/bin/sagactl",
		"/tmp/go-build123/b001/exe/sagactl": "go run ./cmd/sagactl",
		"":                                  "sagactl",
	} {
		if got := selfName(arg0); got != want {
			t.Errorf("selfName(%q) = %q, want %q", arg0, got, want)
		}
	}
}

func TestDurationFlagSuggestsUnit(t *testing.T) {
	var errb bytes.Buffer
	code := run(context.Background(), []string{"stuck", "-older-than", "5"}, stdio{out: io.Discard, err: &errb, getenv: func(string) string { return "" }})
	if code != exitUsage || !strings.Contains(errb.String(), "5m for minutes") {
		t.Errorf("exit %d, stderr:\n%s\nwant exit %d and a suggestion of 5m", code, errb.String(), exitUsage)
	}
	var d time.Duration
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	durationVar(fs, &d, "d", time.Second, "")
	if err := fs.Parse([]string{"-d", "90s"}); err != nil || d != 90*time.Second {
		t.Errorf("-d 90s: %v, %v", d, err)
	}
}
