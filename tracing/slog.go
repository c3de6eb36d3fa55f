package tracing

import (
	"context"
	"log/slog"

	"go.opentelemetry.io/otel/trace"
)

// Keys of the attributes [NewLogHandler] adds to every record. The entity
// attribute uses the key given to [WithEntity] (e.g. "order.id").
const (
	LogKeyTraceID       = "trace_id"
	LogKeySpanID        = "span_id"
	LogKeyCorrelationID = "correlation_id"
)

// NewLogHandler wraps next so that every record logged with a context (the
// slog *Context methods, e.g. logger.InfoContext(ctx, ...)) carries the ids
// needed to jump from a log line to its saga and trace:
//
//   - trace_id and span_id of the span in ctx, when it is valid;
//   - correlation_id from [CorrelationID];
//   - the entity from [Entity], under its own key (e.g. "order.id").
//
// They are added at the top level of the record even when the logger was
// derived with WithGroup, so log queries never depend on how a logger was
// built. Records logged without a context, or with one that carries none of
// these, pass through unchanged.
func NewLogHandler(next slog.Handler) slog.Handler {
	if h, ok := next.(*logHandler); ok {
		return h // already wrapped
	}
	return &logHandler{next: next}
}

// logHandler keeps WithAttrs/WithGroup calls as a list and applies them in
// Handle, so that the correlation attributes can be put outside any group.
type logHandler struct {
	next slog.Handler // never has groups applied
	ops  []logOp
	// top lists the keys given to next.WithAttrs, which sit at the top level
	// of every record next writes.
	top []string
}

// logOp is either a group (group != "") or a set of attributes.
type logOp struct {
	group string
	attrs []slog.Attr
}

func (h *logHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return h.next.Enabled(ctx, l)
}

func (h *logHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	if len(attrs) == 0 {
		return h
	}
	if len(h.ops) == 0 {
		// No group open: let next pre-format the attributes (fast path).
		top := make([]string, len(h.top), len(h.top)+len(attrs))
		copy(top, h.top)
		for _, a := range attrs {
			top = append(top, a.Key)
		}
		return &logHandler{next: h.next.WithAttrs(attrs), top: top}
	}
	return h.with(logOp{attrs: attrs})
}

func (h *logHandler) WithGroup(name string) slog.Handler {
	if name == "" {
		return h
	}
	return h.with(logOp{group: name})
}

func (h *logHandler) with(op logOp) *logHandler {
	ops := make([]logOp, len(h.ops), len(h.ops)+1)
	copy(ops, h.ops)
	return &logHandler{next: h.next, ops: append(ops, op), top: h.top}
}

func (h *logHandler) Handle(ctx context.Context, r slog.Record) error {
	// One slice for the ids and, without groups, the record's attributes, so
	// the new record gets them in a single AddAttrs.
	n := 4
	if len(h.ops) == 0 {
		n += r.NumAttrs()
	}
	attrs := h.dedup(appendCorrelationAttrs(make([]slog.Attr, 0, n), ctx), r)
	if len(attrs) == 0 && len(h.ops) == 0 {
		return h.next.Handle(ctx, r)
	}
	out := slog.NewRecord(r.Time, r.Level, r.Message, r.PC)
	if len(h.ops) == 0 {
		r.Attrs(func(a slog.Attr) bool {
			attrs = append(attrs, a)
			return true
		})
		out.AddAttrs(attrs...)
		return h.next.Handle(ctx, out)
	}

	// The record's own attributes belong inside the innermost group.
	inner := make([]slog.Attr, 0, r.NumAttrs())
	r.Attrs(func(a slog.Attr) bool {
		inner = append(inner, a)
		return true
	})
	for i := len(h.ops) - 1; i >= 0; i-- {
		op := h.ops[i]
		if op.group == "" {
			inner = append(append(make([]slog.Attr, 0, len(op.attrs)+len(inner)), op.attrs...), inner...)
			continue
		}
		if len(inner) == 0 {
			continue // slog drops empty groups
		}
		inner = []slog.Attr{{Key: op.group, Value: slog.GroupValue(inner...)}}
	}
	out.AddAttrs(append(attrs, inner...)...)
	return h.next.Handle(ctx, out)
}

// dedup drops the ids whose key the record already has at its top level
// (e.g. a logger that adds correlation_id itself), so no key appears twice.
func (h *logHandler) dedup(ids []slog.Attr, r slog.Record) []slog.Attr {
	if len(ids) == 0 {
		return ids
	}
	present := func(key string) bool {
		for _, k := range h.top {
			if k == key {
				return true
			}
		}
		if len(h.ops) > 0 {
			// ops always starts with a group (attributes added before any
			// group went to next.WithAttrs), so the record's own attributes
			// are not at the top level.
			return false
		}
		found := false
		r.Attrs(func(a slog.Attr) bool {
			found = a.Key == key
			return !found
		})
		return found
	}
	out := ids[:0]
	for _, a := range ids {
		if !present(a.Key) {
			out = append(out, a)
		}
	}
	return out
}

// appendCorrelationAttrs appends the ids of ctx to attrs as log attributes.
func appendCorrelationAttrs(attrs []slog.Attr, ctx context.Context) []slog.Attr {
	if ctx == nil {
		return attrs
	}
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		attrs = append(attrs,
			slog.String(LogKeyTraceID, sc.TraceID().String()),
			slog.String(LogKeySpanID, sc.SpanID().String()),
		)
	}
	if id := CorrelationID(ctx); id != "" {
		attrs = append(attrs, slog.String(LogKeyCorrelationID, id))
	}
	if key, id := Entity(ctx); key != "" && id != "" {
		attrs = append(attrs, slog.String(key, id))
	}
	return attrs
}
