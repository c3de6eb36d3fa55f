package main

import (
	"strings"
	"testing"
	"time"
)

// TestJudge: the size of a table with a retention the soak shortens is judged against
// its size when the window was first reached; a table that grows with the orders by
// design is reported per order, not judged; RSS slopes and confirmed ÷ offered are
// judged from the samples.
func TestJudge(t *testing.T) {
	c := config{duration: 10 * time.Minute, retention: 2 * time.Minute, warmup: time.Minute}
	var r results
	for i := range 11 {
		grow := int64(i) * 1000
		r.Samples = append(r.Samples, sample{
			T:      float64(i * 60),
			RSSMiB: map[string]float64{"order": 100 + float64(i)}, // 6 MiB/h
			Tables: map[string]tableSample{
				"order.choreo_idempotency": {Bytes: 8192 + min(grow, 2000)}, // levels off at the window
				"order.choreo_outbox":      {Bytes: 8192 + grow},            // keeps growing
				"order.orders":             {Bytes: 8192 + grow},
			},
			Offered: i * 100, Confirmed: i * 100,
		})
	}
	r.judge(c)
	got := map[string]verdict{}
	for _, v := range r.Verdicts {
		got[v.Name] = v
	}
	if v := got["table_size order.choreo_idempotency"]; !v.Pass || v.Figure != 1 {
		t.Errorf("idempotency table %+v, want 1.0 and met", v)
	}
	if v := got["table_size order.choreo_outbox"]; v.Pass {
		t.Errorf("outbox table growing past its window %+v, want not met", v)
	}
	if _, ok := got["table_size order.orders"]; ok || len(r.Growth) != 1 || r.Growth[0].Table != "order.orders" ||
		r.Growth[0].BytesPerOrder != 10 {
		t.Errorf("orders: verdict %v, growth %+v; want no verdict and 10 bytes per order", ok, r.Growth)
	}
	if v := got["rss_slope order"]; v.Pass || v.Figure < 59.9 || v.Figure > 60.1 {
		t.Errorf("RSS slope %+v, want 60 MiB/h and not met", v)
	}
	if v := got["confirmed_over_offered"]; !v.Pass || v.Figure != 1 {
		t.Errorf("confirmed ÷ offered %+v, want 1 and met", v)
	}
	var b strings.Builder
	printResults(&b, &r)
	if !strings.Contains(b.String(), "order.orders") || !strings.Contains(b.String(), "FAIL") {
		t.Errorf("printed:\n%s", b.String())
	}
}
