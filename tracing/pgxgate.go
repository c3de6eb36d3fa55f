package tracing

import (
	"context"

	"github.com/exaring/otelpgx"
	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/trace"
)

// recordingPgx calls otelpgx only for statements inside a recording span.
// otelpgx skips the span of a statement outside one, but still stores a start
// time in a new context per statement for its metrics; with the per-statement
// metrics off ([WithStatementMetrics]) that is work nobody reads. Each Trace*End
// is called with the context its Trace*Start returned: a recording span there
// is either the statement's own span or a recording parent, and otelpgx ran
// at the start in both cases.
type recordingPgx struct{ t *otelpgx.Tracer }

func recording(ctx context.Context) bool { return trace.SpanFromContext(ctx).IsRecording() }

func (r recordingPgx) TraceQueryStart(ctx context.Context, c *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	if !recording(ctx) {
		return ctx
	}
	return r.t.TraceQueryStart(ctx, c, d)
}

func (r recordingPgx) TraceQueryEnd(ctx context.Context, c *pgx.Conn, d pgx.TraceQueryEndData) {
	if recording(ctx) {
		r.t.TraceQueryEnd(ctx, c, d)
	}
}

func (r recordingPgx) TraceBatchStart(ctx context.Context, c *pgx.Conn, d pgx.TraceBatchStartData) context.Context {
	if !recording(ctx) {
		return ctx
	}
	return r.t.TraceBatchStart(ctx, c, d)
}

func (r recordingPgx) TraceBatchQuery(ctx context.Context, c *pgx.Conn, d pgx.TraceBatchQueryData) {
	if recording(ctx) {
		r.t.TraceBatchQuery(ctx, c, d)
	}
}

func (r recordingPgx) TraceBatchEnd(ctx context.Context, c *pgx.Conn, d pgx.TraceBatchEndData) {
	if recording(ctx) {
		r.t.TraceBatchEnd(ctx, c, d)
	}
}

func (r recordingPgx) TraceCopyFromStart(ctx context.Context, c *pgx.Conn, d pgx.TraceCopyFromStartData) context.Context {
	if !recording(ctx) {
		return ctx
	}
	return r.t.TraceCopyFromStart(ctx, c, d)
}

func (r recordingPgx) TraceCopyFromEnd(ctx context.Context, c *pgx.Conn, d pgx.TraceCopyFromEndData) {
	if recording(ctx) {
		r.t.TraceCopyFromEnd(ctx, c, d)
	}
}

func (r recordingPgx) TracePrepareStart(ctx context.Context, c *pgx.Conn, d pgx.TracePrepareStartData) context.Context {
	if !recording(ctx) {
		return ctx
	}
	return r.t.TracePrepareStart(ctx, c, d)
}

func (r recordingPgx) TracePrepareEnd(ctx context.Context, c *pgx.Conn, d pgx.TracePrepareEndData) {
	if recording(ctx) {
		r.t.TracePrepareEnd(ctx, c, d)
	}
}

func (r recordingPgx) TraceConnectStart(ctx context.Context, d pgx.TraceConnectStartData) context.Context {
	if !recording(ctx) {
		return ctx
	}
	return r.t.TraceConnectStart(ctx, d)
}

func (r recordingPgx) TraceConnectEnd(ctx context.Context, d pgx.TraceConnectEndData) {
	if recording(ctx) {
		r.t.TraceConnectEnd(ctx, d)
	}
}

var (
	_ pgx.QueryTracer    = recordingPgx{}
	_ pgx.BatchTracer    = recordingPgx{}
	_ pgx.CopyFromTracer = recordingPgx{}
	_ pgx.PrepareTracer  = recordingPgx{}
	_ pgx.ConnectTracer  = recordingPgx{}
)
