package consumer

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
)

func TestRecover(t *testing.T) {
	tests := []struct {
		name   string
		value  any
		wantIs error
	}{
		{"string", "boom", ErrPanic},
		{"error value", io.ErrUnexpectedEOF, io.ErrUnexpectedEOF},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := recoverPanics()(func(context.Context, *Message) error { panic(tt.value) })(context.Background(), &Message{})
			var pe *panicError
			if !errors.As(err, &pe) || !errors.Is(err, ErrPanic) || !errors.Is(err, tt.wantIs) {
				t.Fatalf("error %v is not a panicError matching %v", err, tt.wantIs)
			}
			if pe.value != tt.value || !strings.Contains(string(pe.stack), "recover_test.go") {
				t.Errorf("panic value %v, stack %q", pe.value, pe.stack)
			}
			if Retryable(err) {
				t.Error("a panic is classified retryable")
			}
			if Reason(err) != ReasonPanic {
				t.Errorf("Reason = %q", Reason(err))
			}
		})
	}
	want := errors.New("plain")
	if err := recoverPanics()(func(context.Context, *Message) error { return want })(context.Background(), &Message{}); err != want {
		t.Errorf("Recover changed a plain error: %v", err)
	}
}
