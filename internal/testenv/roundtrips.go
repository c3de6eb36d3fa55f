package testenv

import (
	"context"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5"
)

// RoundTrips is a pgx tracer (set it as pgx.ConnConfig.Tracer) that records every round
// trip to Postgres: a statement sent on its own as its first word in lower case
// ("begin", "insert"), a pgx batch as its statements' first words joined by "; "
// ("begin; insert", "insert; commit"). pgx reports a batch's statements as it sends or
// reads them, depending on the query execution mode: a statement that did not run
// because an earlier one failed may be missing.
type RoundTrips struct {
	mu  sync.Mutex
	all []string
}

var (
	_ pgx.QueryTracer = (*RoundTrips)(nil)
	_ pgx.BatchTracer = (*RoundTrips)(nil)
)

// Take returns the round trips recorded since the last call and forgets them.
func (r *RoundTrips) Take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	all := r.all
	r.all = nil
	return all
}

// TraceQueryStart records a statement sent on its own.
func (r *RoundTrips) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	r.mu.Lock()
	r.all = append(r.all, firstWord(d.SQL))
	r.mu.Unlock()
	return ctx
}

// TraceQueryEnd does nothing.
func (r *RoundTrips) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// TraceBatchStart records a new batch.
func (r *RoundTrips) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	r.mu.Lock()
	r.all = append(r.all, "")
	r.mu.Unlock()
	return ctx
}

// TraceBatchQuery adds a statement to the current batch.
func (r *RoundTrips) TraceBatchQuery(_ context.Context, _ *pgx.Conn, d pgx.TraceBatchQueryData) {
	r.mu.Lock()
	defer r.mu.Unlock()
	last := &r.all[len(r.all)-1]
	if *last != "" {
		*last += "; "
	}
	*last += firstWord(d.SQL)
}

// TraceBatchEnd does nothing.
func (r *RoundTrips) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

// firstWord is the first word of sql in lower case.
func firstWord(sql string) string {
	w, _, _ := strings.Cut(strings.TrimSpace(sql), " ")
	return strings.ToLower(w)
}
