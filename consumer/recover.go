package consumer

import (
	"context"
	"fmt"
	"runtime/debug"
)

// panicError is the error Recover returns for a panic. It matches ErrPanic with errors.Is
// and, when the panic value was an error, that error too; its text holds the panic value
// and the stack.
type panicError struct {
	value any    // what the handler passed to panic
	stack []byte // the goroutine's stack at the panic
}

// Error returns ErrPanic's text, the panic value and the stack.
func (e *panicError) Error() string {
	return fmt.Sprintf("%v: %v\n%s", ErrPanic, e.value, e.stack)
}

// Unwrap lets errors.Is match ErrPanic and, if the panic value is an error, that error.
func (e *panicError) Unwrap() []error {
	if err, ok := e.value.(error); ok {
		return []error{ErrPanic, err}
	}
	return []error{ErrPanic}
}

// recoverPanics turns a panic in the handlers it wraps into an error matching ErrPanic (non-retryable, see
// Retryable), so that one bad event cannot crash the process. Standard uses it twice:
// outermost, to guard the runtime, and just inside Retry, so that a panicking business
// handler sends its event to the dead-letter topic instead of blocking the partition.
func recoverPanics() Middleware {
	return func(next Handler) Handler {
		return func(ctx context.Context, m *Message) (err error) {
			defer recoverPanic(&err)
			return next(ctx, m)
		}
	}
}

// recoverPanic, deferred, turns a panic into a *panicError in *err. Recover and
// StandardBatch both defer it.
func recoverPanic(err *error) {
	if v := recover(); v != nil {
		*err = &panicError{value: v, stack: debug.Stack()}
	}
}
