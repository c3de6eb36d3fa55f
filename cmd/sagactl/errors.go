package main

import (
	"context"
	"errors"
	"net"
	"net/url"
	"syscall"
)

// Exit codes, documented in doc.go.
const (
	exitOK          = 0
	exitFailure     = 1
	exitUsage       = 2
	exitUnreachable = 3
)

var (
	// errUsage marks a command-line mistake (exit 2).
	errUsage = errors.New("sagactl: usage")
	// errUnreachable marks a service or broker that did not answer (exit 3).
	errUnreachable = errors.New("sagactl: unreachable")
	// errNotFound is returned for an order or dead-letter record that does not exist.
	errNotFound = errors.New("sagactl: not found")
	// errIncomplete is returned by load when orders failed or did not settle.
	errIncomplete = errors.New("sagactl: load incomplete")
)

// exitCode maps an error to the process exit code.
func exitCode(err error) int {
	switch {
	case err == nil:
		return exitOK
	case errors.Is(err, errUsage):
		return exitUsage
	case errors.Is(err, errUnreachable):
		return exitUnreachable
	default:
		return exitFailure
	}
}

// isConnError reports whether err means the peer could not be reached at all: refused,
// unresolvable, no route, or a dial that timed out.
func isConnError(err error) bool {
	var (
		opErr  *net.OpError
		dnsErr *net.DNSError
		urlErr *url.Error
	)
	switch {
	case errors.As(err, &dnsErr):
		return true
	case errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.EHOSTUNREACH),
		errors.Is(err, syscall.ENETUNREACH), errors.Is(err, syscall.ECONNRESET):
		return true
	case errors.As(err, &opErr) && opErr.Op == "dial":
		return true
	case errors.As(err, &urlErr) && urlErr.Timeout():
		return true
	case errors.Is(err, context.DeadlineExceeded):
		return true
	}
	return false
}
