package tracing_test

import (
	"context"
	"reflect"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/plugin/kotel"
	"go.opentelemetry.io/otel/trace"

	"github.com/choreo-saga/choreo/tracing"
)

func hdrs(kv ...string) []kgo.RecordHeader {
	var hs []kgo.RecordHeader
	for i := 0; i < len(kv); i += 2 {
		hs = append(hs, kgo.RecordHeader{Key: kv[i], Value: []byte(kv[i+1])})
	}
	return hs
}

func TestRecordCarrierSetReplaces(t *testing.T) {
	tests := []struct {
		name string
		in   []kgo.RecordHeader
		key  string
		val  string
		want []kgo.RecordHeader
	}{
		{"no headers", nil, "traceparent", "new", hdrs("traceparent", "new")},
		{"absent key appends", hdrs("ce_id", "1"), "traceparent", "new", hdrs("ce_id", "1", "traceparent", "new")},
		{"present key replaced in place", hdrs("traceparent", "old", "ce_id", "1"), "traceparent", "new",
			hdrs("traceparent", "new", "ce_id", "1")},
		{"duplicates collapse to one", hdrs("a", "1", "traceparent", "x", "b", "2", "traceparent", "y"), "traceparent", "new",
			hdrs("a", "1", "traceparent", "new", "b", "2")},
		{"keys are case-sensitive", hdrs("Traceparent", "old"), "traceparent", "new",
			hdrs("Traceparent", "old", "traceparent", "new")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := &kgo.Record{Headers: append([]kgo.RecordHeader(nil), tt.in...)}
			c := tracing.RecordCarrier{Record: r}
			c.Set(tt.key, tt.val)
			if !reflect.DeepEqual(r.Headers, tt.want) {
				t.Fatalf("headers = %q, want %q", r.Headers, tt.want)
			}
			if got := c.Get(tt.key); got != tt.val {
				t.Fatalf("Get(%q) = %q, want %q", tt.key, got, tt.val)
			}
		})
	}
}

func TestRecordCarrierSetDoesNotAliasSharedHeaders(t *testing.T) {
	shared := hdrs("traceparent", "old", "ce_id", "1")
	a := &kgo.Record{Headers: shared}
	b := &kgo.Record{Headers: shared}
	tracing.RecordCarrier{Record: a}.Set("traceparent", "new")
	if got := (tracing.RecordCarrier{Record: b}).Get("traceparent"); got != "old" {
		t.Fatalf("the other record's traceparent changed to %q", got)
	}
}

func TestRecordCarrierGetAndKeys(t *testing.T) {
	r := &kgo.Record{Headers: hdrs("a", "1", "b", "2", "a", "3")}
	c := tracing.RecordCarrier{Record: r}
	if got := c.Get("a"); got != "3" {
		t.Errorf("Get(a) = %q, want the last value 3", got)
	}
	if got := c.Get("missing"); got != "" {
		t.Errorf("Get(missing) = %q, want empty", got)
	}
	if got, want := c.Keys(), []string{"a", "b"}; !reflect.DeepEqual(got, want) {
		t.Errorf("Keys = %q, want %q", got, want)
	}
}

// A hand-built W3C traceparent, as any other Kafka client would write it,
// continues as the same trace.
func TestExtractHandBuiltTraceparent(t *testing.T) {
	tp, rec := newRecorder(t)
	const (
		traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
		spanID  = "00f067aa0ba902b7"
	)
	r := &kgo.Record{Topic: "orders.events", Headers: hdrs(
		"traceparent", "00-"+traceID+"-"+spanID+"-01",
		"tracestate", "vendor=opaque",
		"baggage", "saga.correlation_id=order-42,other=x",
	)}
	ctx := tracing.Extract(context.Background(), r)
	if got := tracing.CorrelationID(ctx); got != "order-42" {
		t.Errorf("correlation id from baggage = %q, want order-42", got)
	}
	_, span := tp.Tracer("test").Start(ctx, "handle")
	span.End()

	s := spanNamed(t, rec, "handle")
	if got := s.SpanContext().TraceID().String(); got != traceID {
		t.Errorf("trace id = %s, want %s", got, traceID)
	}
	if got := s.Parent().SpanID().String(); got != spanID || !s.Parent().IsRemote() {
		t.Errorf("parent = %s (remote %v), want remote %s", got, s.Parent().IsRemote(), spanID)
	}
	if got := s.SpanContext().TraceState().Get("vendor"); got != "opaque" {
		t.Errorf("tracestate vendor = %q, want opaque", got)
	}
	if got := attrs(s)[tracing.AttrCorrelationID]; got != "order-42" {
		t.Errorf("span %s = %q, want order-42", tracing.AttrCorrelationID, got)
	}

	// Re-injecting into the same record replaces the old context rather than
	// adding a second traceparent.
	ctx, span = tp.Tracer("test").Start(ctx, "next")
	tracing.Inject(ctx, r)
	span.End()
	n := 0
	for _, h := range r.Headers {
		if h.Key == "traceparent" {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("%d traceparent headers after Inject, want 1", n)
	}
	want := "00-" + traceID + "-" + span.SpanContext().SpanID().String() + "-01"
	if got := (tracing.RecordCarrier{Record: r}).Get("traceparent"); got != want {
		t.Fatalf("traceparent = %q, want %q", got, want)
	}
}

// A record produced through franz-go's kotel plugin is continued by our
// Extract (and Kafka.StartProcess) as the same trace, child of kotel's
// publish span.
func TestInteropKotelToChoreo(t *testing.T) {
	brokers, topic := kafkaTopic(t)
	tp, rec := newRecorder(t)
	kt := kotel.NewKotel(kotel.WithTracer(kotel.NewTracer(
		kotel.TracerProvider(tp), kotel.TracerPropagator(tracing.NewPropagator()),
	)))
	producer := kafkaClient(t, brokers, kgo.WithHooks(kt.Hooks()...))

	ctx, root := tp.Tracer("test").Start(context.Background(), "root")
	if err := producer.ProduceSync(ctx, &kgo.Record{Topic: topic, Key: []byte("o-1"), Value: []byte("{}")}).FirstErr(); err != nil {
		t.Fatalf("produce: %v", err)
	}
	root.End()
	publish := spanNamed(t, rec, topic+" publish")

	consumer := kafkaClient(t, brokers, kgo.ConsumeTopics(topic))
	r := consumeOne(t, consumer)

	_, span := tracing.NewKafka(tracing.WithTracerProvider(tp)).StartProcess(context.Background(), r, "g1")
	span.End()
	process := spanNamed(t, rec, "process "+topic)

	if process.SpanContext().TraceID() != root.SpanContext().TraceID() {
		t.Fatalf("process span in trace %s, want kotel's trace %s", process.SpanContext().TraceID(), root.SpanContext().TraceID())
	}
	if process.Parent().SpanID() != publish.SpanContext().SpanID() {
		t.Fatalf("process span parent %s, want kotel publish span %s", process.Parent().SpanID(), publish.SpanContext().SpanID())
	}
}

// A record we inject is read by kotel's consumer hooks: kotel's receive span
// continues our send span's trace.
func TestInteropChoreoToKotel(t *testing.T) {
	brokers, topic := kafkaTopic(t)
	tp, rec := newRecorder(t)
	producer := kafkaClient(t, brokers)

	k := tracing.NewKafka(tracing.WithTracerProvider(tp), tracing.WithPropagator(tracing.NewPropagator()))
	r := &kgo.Record{Topic: topic, Key: []byte("o-1"), Value: []byte("{}")}
	ctx, send := k.StartSend(context.Background(), r)
	res := producer.ProduceSync(ctx, r)
	tracing.EndSend(send, r, res.FirstErr())
	if err := res.FirstErr(); err != nil {
		t.Fatalf("produce: %v", err)
	}
	sendSpan := spanNamed(t, rec, "send "+topic)

	kt := kotel.NewKotel(kotel.WithTracer(kotel.NewTracer(
		kotel.TracerProvider(tp), kotel.TracerPropagator(tracing.NewPropagator()),
	)))
	consumer := kafkaClient(t, brokers, kgo.ConsumeTopics(topic), kgo.WithHooks(kt.Hooks()...))
	got := consumeOne(t, consumer)
	// kotel's receive span ends when the record leaves the client's buffer;
	// its context is on the record.
	sc := trace.SpanContextFromContext(got.Context)
	if sc.TraceID() != sendSpan.SpanContext().TraceID() {
		t.Fatalf("kotel receive span in trace %s, want ours %s", sc.TraceID(), sendSpan.SpanContext().TraceID())
	}
	// kotel's own carrier reads the same traceparent we wrote.
	want := (tracing.RecordCarrier{Record: got}).Get("traceparent")
	if kc := kotel.NewRecordCarrier(got).Get("traceparent"); kc != want || want == "" {
		t.Fatalf("kotel carrier traceparent = %q, ours %q", kc, want)
	}
	receive := spanNamed(t, rec, topic+" receive")
	if receive.Parent().SpanID() != sendSpan.SpanContext().SpanID() {
		t.Fatalf("kotel receive span parent %s, want our send span %s", receive.Parent().SpanID(), sendSpan.SpanContext().SpanID())
	}
}
