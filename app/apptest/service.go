package apptest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/choreo-saga/choreo/event"
)

// Service is a service running in process, started by Start.
type Service struct {
	cancel context.CancelFunc
	done   chan error
}

// Start runs run in a goroutine with a cancellable context, waits until baseURL/readyz
// answers 200, and stops the service when the test ends.
func Start(t testing.TB, baseURL string, run func(ctx context.Context) error) *Service {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	s := &Service{cancel: cancel, done: make(chan error, 1)}
	go func() { s.done <- run(ctx) }()
	t.Cleanup(func() { _ = s.Stop() })
	WaitReady(t, baseURL)
	return s
}

// Stop cancels the service's context and returns run's result; later calls return nil.
func (s *Service) Stop() error {
	if s.cancel == nil {
		return nil
	}
	s.cancel()
	s.cancel = nil
	select {
	case err := <-s.done:
		return err
	case <-time.After(DefaultTimeout):
		return fmt.Errorf("apptest: service did not stop within %v", DefaultTimeout)
	}
}

// NewEvent is event.New, failing t on an error.
func NewEvent(t testing.TB, source, typ, subject string, data any) event.Event {
	t.Helper()
	ev, err := event.New(source, typ, subject, data)
	if err != nil {
		t.Fatal(err)
	}
	return ev
}
