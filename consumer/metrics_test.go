package consumer

import (
	"context"
	"errors"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

func collect(t *testing.T, r *sdkmetric.ManualReader) map[string]metricdata.Metrics {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	out := make(map[string]metricdata.Metrics)
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			out[m.Name] = m
		}
	}
	return out
}

func outcomeOf(set attribute.Set) string {
	v, _ := set.Value(outcomeKey)
	return v.AsString()
}

func TestMetrics(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mw, err := measure(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)))
	if err != nil {
		t.Fatal(err)
	}
	outcomes := map[Outcome]int{OutcomeHandled: 3, OutcomeDuplicate: 2, OutcomeDeadLettered: 1, OutcomeFailed: 1}
	for o, n := range outcomes {
		for range n {
			h := mw(func(_ context.Context, m *Message) error {
				m.Attempt = 2
				if o == OutcomeFailed {
					return errors.New("boom")
				}
				if o != OutcomeHandled {
					m.Outcome = o
				}
				return nil
			})
			_ = h(context.Background(), &Message{Record: &kgo.Record{Topic: "orders", Partition: 1}, Group: "payments"})
		}
	}
	ms := collect(t, reader)

	counts := make(map[string]int64)
	for _, dp := range ms[MetricOutcomes].Data.(metricdata.Sum[int64]).DataPoints {
		counts[outcomeOf(dp.Attributes)] += dp.Value
		if v, _ := dp.Attributes.Value("messaging.consumer.group.name"); v.AsString() != "payments" {
			t.Errorf("group attribute %v", v)
		}
		if v, ok := dp.Attributes.Value("error.type"); ok != (outcomeOf(dp.Attributes) == string(OutcomeFailed)) {
			t.Errorf("error.type %v on outcome %s", v, outcomeOf(dp.Attributes))
		}
	}
	for o, n := range outcomes {
		if counts[string(o)] != int64(n) {
			t.Errorf("outcome %s counted %d, want %d", o, counts[string(o)], n)
		}
	}
	var durations uint64
	for _, dp := range ms[MetricProcessDuration].Data.(metricdata.Histogram[float64]).DataPoints {
		durations += dp.Count
	}
	if durations != 7 {
		t.Errorf("%d durations recorded, want 7", durations)
	}
	for _, dp := range ms[MetricAttempts].Data.(metricdata.Histogram[int64]).DataPoints {
		if dp.Sum != 2*int64(dp.Count) {
			t.Errorf("attempts sum %d over %d handlings, want 2 each", dp.Sum, dp.Count)
		}
	}
}
