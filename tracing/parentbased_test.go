package tracing_test

import (
	"bytes"
	"context"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/trace"

	"github.com/choreo-saga/choreo/internal/testenv"
	"github.com/choreo-saga/choreo/tracing"
)

// hop is one service of TestIntermediateServiceKeepsParentDecision: its own
// telemetry and the Kafka instrumentation built on it.
type hop struct {
	tel *tracing.Telemetry
	k   *tracing.Kafka
}

// newHop builds a service's telemetry from the environment given as kv (on
// top of a clean OTEL_* environment), as a process started with it would.
func newHop(t *testing.T, name string, kv ...string) hop {
	t.Helper()
	cleanEnv(t, kv...)
	tel, err := tracing.Setup(context.Background(), name, tracing.WithoutGlobals())
	if err != nil {
		t.Fatalf("Setup %s: %v", name, err)
	}
	t.Cleanup(func() { _ = tel.Shutdown(context.Background()) })
	return hop{tel: tel, k: tracing.NewKafka(tracing.WithTracerProvider(tel.TracerProvider), tracing.WithPropagator(tel.Propagator))}
}

// relay consumes one record of in (a consumer on it), processes it with a
// handler span and produces its next event to out, as a choreo consumer whose
// handler enqueues an event does. It returns the process span and the record
// produced.
func (h hop) relay(t *testing.T, in *kgo.Client, producer *kgo.Client, out string) (trace.Span, *kgo.Record) {
	t.Helper()
	got := consumeOne(t, in)
	ctx, process := h.k.StartProcess(context.Background(), got, "group")
	defer process.End()
	ctx, handler := h.tel.TracerProvider.Tracer("t").Start(ctx, "handler")
	defer handler.End()
	return process, h.send(t, ctx, producer, out)
}

// send produces one record to topic inside a send span started in ctx.
func (h hop) send(t *testing.T, ctx context.Context, producer *kgo.Client, topic string) *kgo.Record {
	t.Helper()
	r := &kgo.Record{Topic: topic, Key: []byte("o-1"), Value: []byte(`{}`)}
	sctx, send := h.k.StartSend(ctx, r)
	err := producer.ProduceSync(sctx, r).FirstErr()
	tracing.EndSend(send, r, err)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestIntermediateServiceKeepsParentDecision runs a trace through three
// services over a Kafka-protocol broker: A exports over OTLP and samples, B
// has no exporter, C exports and samples parent-based (the default with an
// exporter). B must keep A's sampled decision on what it produces, so C's
// spans join A's trace and are exported; and a trace B starts itself stays
// unsampled, so C records nothing of it.
func TestIntermediateServiceKeepsParentDecision(t *testing.T) {
	recv := &otlpReceiver{}
	srv := httptest.NewServer(recv)
	t.Cleanup(srv.Close)
	exporting := []string{"OTEL_EXPORTER_OTLP_ENDPOINT", srv.URL, "OTEL_METRICS_EXPORTER", "none"}
	a := newHop(t, "a", exporting...)
	b := newHop(t, "b")
	c := newHop(t, "c", exporting...)
	if !a.tel.RecordsSpans || b.tel.RecordsSpans || !c.tel.RecordsSpans || b.tel.TracesExporter != "" {
		t.Fatalf("RecordsSpans a=%v b=%v c=%v, b exporter %q: want true, false, true, none",
			a.tel.RecordsSpans, b.tel.RecordsSpans, c.tel.RecordsSpans, b.tel.TracesExporter)
	}

	brokers, ab := kafkaTopic(t)
	bc := testenv.Topic(t, brokers, 1)
	producer := kafkaClient(t, brokers)
	bIn := kafkaClient(t, brokers, kgo.ConsumeTopics(ab))
	cIn := kafkaClient(t, brokers, kgo.ConsumeTopics(bc))

	// A starts and samples the trace.
	actx, root := a.tel.TracerProvider.Tracer("t").Start(context.Background(), "checkout")
	a.send(t, actx, producer, ab)
	root.End()
	traceID := root.SpanContext().TraceID()
	if !root.SpanContext().IsSampled() {
		t.Fatal("A's root span is not sampled")
	}

	// B continues it without an exporter: recorded, sampled, propagated "-01".
	bProcess, toC := b.relay(t, bIn, producer, bc)
	if sc := bProcess.SpanContext(); sc.TraceID() != traceID || !sc.IsSampled() {
		t.Fatalf("B's process span %v: want A's trace %s, sampled", sc, traceID)
	}
	tp := tracing.RecordCarrier{Record: toC}.Get("traceparent")
	if !strings.HasPrefix(tp, "00-"+traceID.String()+"-") || !strings.HasSuffix(tp, "-01") {
		t.Fatalf("B propagated traceparent %q: want A's trace %s with the sampled flag", tp, traceID)
	}

	// C continues it and exports.
	cProcess, _ := c.relay(t, cIn, producer, ab)
	if sc := cProcess.SpanContext(); sc.TraceID() != traceID || !sc.IsSampled() {
		t.Fatalf("C's process span %v: want A's trace %s, sampled", sc, traceID)
	}

	// A trace B starts itself: ids only, "-00", and C follows that decision.
	bctx, bRoot := b.tel.TracerProvider.Tracer("t").Start(context.Background(), "b-root")
	own := b.send(t, bctx, producer, bc)
	bRoot.End()
	ownTrace := bRoot.SpanContext().TraceID()
	if bRoot.IsRecording() || bRoot.SpanContext().IsSampled() || !bRoot.SpanContext().IsValid() {
		t.Fatalf("B's root span %v recording %v: want ids only", bRoot.SpanContext(), bRoot.IsRecording())
	}
	if tp := (tracing.RecordCarrier{Record: own}).Get("traceparent"); !strings.HasSuffix(tp, "-00") {
		t.Fatalf("B's own traceparent %q: want the sampled flag cleared", tp)
	}
	cOwn, _ := c.relay(t, cIn, producer, ab)
	if sc := cOwn.SpanContext(); sc.TraceID() != ownTrace || sc.IsSampled() || cOwn.IsRecording() {
		t.Fatalf("C's process span %v recording %v: want B's trace %s, not sampled", sc, cOwn.IsRecording(), ownTrace)
	}

	for _, h := range []hop{a, b, c} {
		if err := h.tel.Shutdown(context.Background()); err != nil {
			t.Fatalf("Shutdown (flush): %v", err)
		}
	}
	got := recv.received()
	for _, name := range []string{"a/checkout", "a/send " + ab, "c/process " + bc, "c/handler", "c/send " + ab} {
		s := got[name]
		if s == nil {
			t.Fatalf("exported spans %v lack %s", keys(got), name)
		}
		if !bytes.Equal(s.GetTraceId(), traceID[:]) {
			t.Errorf("span %s has trace %x, want A's %s", name, s.GetTraceId(), traceID)
		}
	}
	// C's process span is a child of B's send span (B exports nothing, so the
	// exported trace links C to A through an unexported hop).
	if p := got["c/process "+bc].GetParentSpanId(); len(p) == 0 {
		t.Error("C's process span has no parent")
	}
	for name, s := range got {
		if strings.HasPrefix(name, "b/") {
			t.Errorf("B has no exporter but span %s was exported", name)
		}
		if bytes.Equal(s.GetTraceId(), ownTrace[:]) {
			t.Errorf("span %s of B's unsampled trace was exported", name)
		}
	}
}
