package tracing_test

import (
	"context"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/baggage"

	"github.com/choreo-saga/choreo/tracing"
)

func TestCorrelationTravelsInBaggage(t *testing.T) {
	ctx := tracing.WithCorrelationID(context.Background(), "order-17")
	if got := baggage.FromContext(ctx).Member("saga.correlation_id").Value(); got != "order-17" {
		t.Fatalf("baggage member = %q, want order-17", got)
	}
	r := &kgo.Record{}
	tracing.Inject(ctx, r)
	if got := (tracing.RecordCarrier{Record: r}).Get("baggage"); !strings.Contains(got, "saga.correlation_id=order-17") {
		t.Fatalf("baggage header = %q", got)
	}
	if got := tracing.CorrelationID(tracing.Extract(context.Background(), r)); got != "order-17" {
		t.Fatalf("CorrelationID after Extract = %q, want order-17", got)
	}
}

func TestCorrelationContext(t *testing.T) {
	bg := context.Background()
	tests := []struct {
		name  string
		ctx   context.Context
		corr  string
		attrs []attribute.KeyValue
	}{
		{"empty", bg, "", nil},
		{"correlation only", tracing.WithCorrelationID(bg, "c1"), "c1",
			[]attribute.KeyValue{attribute.String(tracing.AttrCorrelationID, "c1")}},
		{"inner id wins", tracing.WithCorrelationID(tracing.WithCorrelationID(bg, "outer"), "inner"), "inner",
			[]attribute.KeyValue{attribute.String(tracing.AttrCorrelationID, "inner")}},
		{"empty id keeps outer", tracing.WithCorrelationID(tracing.WithCorrelationID(bg, "outer"), ""), "outer",
			[]attribute.KeyValue{attribute.String(tracing.AttrCorrelationID, "outer")}},
		{"entity", tracing.WithEntity(tracing.WithCorrelationID(bg, "c1"), "order.id", "o-1"), "c1",
			[]attribute.KeyValue{attribute.String(tracing.AttrCorrelationID, "c1"), attribute.String("order.id", "o-1")}},
		{"entity without id is dropped", tracing.WithEntity(bg, "order.id", ""), "", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tracing.CorrelationID(tt.ctx); got != tt.corr {
				t.Errorf("CorrelationID = %q, want %q", got, tt.corr)
			}
			got := tracing.SpanAttributesForTest(tt.ctx)
			if len(got) != len(tt.attrs) {
				t.Fatalf("SpanAttributes = %v, want %v", got, tt.attrs)
			}
			for i := range got {
				if got[i] != tt.attrs[i] {
					t.Errorf("SpanAttributes[%d] = %v, want %v", i, got[i], tt.attrs[i])
				}
			}
		})
	}
	// Entity stays in-process.
	ctx := tracing.WithEntity(bg, "order.id", "o-1")
	if m := baggage.FromContext(ctx).Members(); len(m) != 0 {
		t.Fatalf("entity leaked into baggage: %v", m)
	}
}

func TestAnnotateSpan(t *testing.T) {
	tp, rec := newRecorder(t)
	ctx, span := tp.Tracer("t").Start(context.Background(), "http")
	ctx = tracing.WithEntity(tracing.WithCorrelationID(ctx, "o-5"), "order.id", "o-5")
	tracing.AnnotateSpan(ctx)
	span.End()
	a := attrs(spanNamed(t, rec, "http"))
	if a[tracing.AttrCorrelationID] != "o-5" || a["order.id"] != "o-5" {
		t.Fatalf("attributes = %v", a)
	}
}
