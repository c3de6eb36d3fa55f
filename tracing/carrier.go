package tracing

import (
	"context"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/propagation"
)

// RecordCarrier adapts a Kafka record's headers to propagation.TextMapCarrier, so any
// OpenTelemetry propagator can read and write W3C trace context (traceparent, tracestate,
// baggage) on records. Set replaces every existing header with the same key.
type RecordCarrier struct {
	Record *kgo.Record
}

var _ propagation.TextMapCarrier = RecordCarrier{}

// Get returns the value of the last header named key, or "".
func (c RecordCarrier) Get(key string) string {
	for i := len(c.Record.Headers) - 1; i >= 0; i-- {
		if c.Record.Headers[i].Key == key {
			return string(c.Record.Headers[i].Value)
		}
	}
	return ""
}

// Set stores value under key, replacing any header with that key (the first
// one keeps its position, later duplicates are dropped). When a header is
// replaced, the header slice is copied rather than edited in place, so a
// record whose headers share a backing array with another record never
// changes the other record.
func (c RecordCarrier) Set(key, value string) {
	first, n := -1, 0
	for i, h := range c.Record.Headers {
		if h.Key == key {
			if first < 0 {
				first = i
			}
			n++
		}
	}
	if first < 0 {
		c.Record.Headers = append(c.Record.Headers, kgo.RecordHeader{Key: key, Value: []byte(value)})
		return
	}
	hs := make([]kgo.RecordHeader, 0, len(c.Record.Headers)-n+1)
	for i, h := range c.Record.Headers {
		switch {
		case i == first:
			hs = append(hs, kgo.RecordHeader{Key: key, Value: []byte(value)})
		case h.Key != key:
			hs = append(hs, h)
		}
	}
	c.Record.Headers = hs
}

// Keys lists the header keys, once each.
func (c RecordCarrier) Keys() []string {
	keys := make([]string, 0, len(c.Record.Headers))
	seen := make(map[string]bool, len(c.Record.Headers))
	for _, h := range c.Record.Headers {
		if !seen[h.Key] {
			seen[h.Key] = true
			keys = append(keys, h.Key)
		}
	}
	return keys
}

// Inject writes the trace context and baggage of ctx into r's headers with the global
// text map propagator (set by Setup to W3C trace context + baggage); while the global
// one is otel's no-op default, with W3C trace context + baggage all the same, so the
// trace is never cut for want of setup.
func Inject(ctx context.Context, r *kgo.Record) {
	defaultPropagator().Inject(ctx, RecordCarrier{Record: r})
}

// Extract returns ctx carrying the remote span context and baggage found in r's headers
// (with the same propagator as Inject).
func Extract(ctx context.Context, r *kgo.Record) context.Context {
	return defaultPropagator().Extract(ctx, RecordCarrier{Record: r})
}
