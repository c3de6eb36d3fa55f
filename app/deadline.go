package app

import (
	"context"
	"errors"
	"net/http"
	"time"
)

// errRequestTimeout is the cause of a request context cancelled by its deadline.
var errRequestTimeout = errors.New("app: request deadline exceeded")

// timeoutBody is the answer to a request past its deadline.
const timeoutBody = `{"error":{"code":"timeout","message":"request timed out"}}` + "\n"

// withRequestTimeout returns h with a deadline d: the request's context is cancelled at
// d (context.Cause is errRequestTimeout) and, if h had not started its answer by then,
// the client gets 503 with {"error":{"code":"timeout",...}} instead of whatever h writes
// afterwards. h runs on the connection's goroutine, as without a deadline: unlike
// http.TimeoutHandler there is no goroutine, stack growth and buffered copy of the
// answer per request. So h must return when its context ends, as every handler that
// passes it to its database and Kafka calls does; one that ignores it keeps its client
// waiting until it returns or the server's WriteTimeout closes the connection.
func withRequestTimeout(h http.Handler, d time.Duration) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeoutCause(r.Context(), d, errRequestTimeout)
		defer cancel()
		dw := &deadlineWriter{ResponseWriter: w, ctx: ctx}
		h.ServeHTTP(dw, r.WithContext(ctx))
		if !dw.started && !dw.timedOut && context.Cause(ctx) == errRequestTimeout {
			dw.timeout()
		}
	})
}

// deadlineWriter passes h's answer through if h starts it before the request's deadline,
// and answers 503 timeout in its place otherwise.
type deadlineWriter struct {
	http.ResponseWriter
	ctx      context.Context
	started  bool // h's status line went out before the deadline
	timedOut bool // the 503 went out instead
}

func (w *deadlineWriter) WriteHeader(code int) {
	switch {
	case w.started:
		w.ResponseWriter.WriteHeader(code) // net/http reports the superfluous call
	case w.timedOut:
	case context.Cause(w.ctx) == errRequestTimeout:
		w.timeout()
	default:
		w.started = true
		w.ResponseWriter.WriteHeader(code)
	}
}

func (w *deadlineWriter) Write(b []byte) (int, error) {
	if !w.started && !w.timedOut {
		w.WriteHeader(http.StatusOK)
	}
	if w.timedOut {
		return 0, http.ErrHandlerTimeout
	}
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the connection's writer (Flush, deadlines).
func (w *deadlineWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// timeout answers 503 timeout, dropping the headers h had set for its own answer.
func (w *deadlineWriter) timeout() {
	w.timedOut = true
	hdr := w.ResponseWriter.Header()
	clear(hdr)
	hdr.Set("Content-Type", "application/json")
	w.ResponseWriter.WriteHeader(http.StatusServiceUnavailable)
	_, _ = w.ResponseWriter.Write([]byte(timeoutBody))
}

// Flush sends what h has written so far (starting its answer with 200 if it had not).
func (w *deadlineWriter) Flush() {
	if !w.started && !w.timedOut {
		w.WriteHeader(http.StatusOK)
	}
	if !w.timedOut {
		_ = http.NewResponseController(w.ResponseWriter).Flush()
	}
}
