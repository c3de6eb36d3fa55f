package main

import (
	"encoding/binary"
	"fmt"
	"io"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/choreo-saga/choreo/internal/devbroker"
)

// plainAuth authenticates one new connection from the loopback address src with
// SASL/PLAIN (SASLHandshake v1, SASLAuthenticate v1) and reports whether the broker
// accepted user and pass; a broker that refuses closes the connection.
func plainAuth(t *testing.T, addr, src, user, pass string) bool {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 10 * time.Second}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Minute))
	hs := kmsg.NewPtrSASLHandshakeRequest()
	hs.Version, hs.Mechanism = 1, "PLAIN"
	body, err := roundTrip(c, 1, hs)
	if err != nil || len(body) < 2 || binary.BigEndian.Uint16(body) != 0 {
		t.Fatalf("SASLHandshake: %x %v", body, err)
	}
	auth := kmsg.NewPtrSASLAuthenticateRequest()
	auth.Version, auth.SASLAuthBytes = 1, []byte("\x00"+user+"\x00"+pass)
	body, err = roundTrip(c, 2, auth)
	return err == nil && len(body) >= 2 && binary.BigEndian.Uint16(body) == 0
}

// roundTrip sends req (a non-flexible version) and returns the body of its response.
func roundTrip(c net.Conn, corr int32, req kmsg.Request) ([]byte, error) {
	msg := binary.BigEndian.AppendUint16(nil, uint16(req.Key()))
	msg = binary.BigEndian.AppendUint16(msg, uint16(req.GetVersion()))
	msg = binary.BigEndian.AppendUint32(msg, uint32(corr))
	msg = binary.BigEndian.AppendUint16(msg, 4)
	msg = append(msg, "test"...)
	msg = req.AppendTo(msg)
	frame := binary.BigEndian.AppendUint32(nil, uint32(len(msg)))
	if _, err := c.Write(append(frame, msg...)); err != nil {
		return nil, err
	}
	var size [4]byte
	if _, err := io.ReadFull(c, size[:]); err != nil {
		return nil, err
	}
	resp := make([]byte, binary.BigEndian.Uint32(size[:]))
	if _, err := io.ReadFull(c, resp); err != nil {
		return nil, err
	}
	if len(resp) < 4 || int32(binary.BigEndian.Uint32(resp)) != corr {
		return nil, fmt.Errorf("response %x to request %d", resp, corr)
	}
	return resp[4:], nil
}

// TestSASLGuessesAreDelayed: wrong SASL/PLAIN passwords tried one after another from
// one address are spaced, the space doubling with each failure (devbroker's SASL
// throttle); before, devkafka answered 500 guesses in 0.14 s. The right password is
// still accepted, from another address and, in its turn, from the guessing one.
func TestSASLGuessesAreDelayed(t *testing.T) {
	cfg, err := parseFlags([]string{"-port", "0", "-data-dir", "", "-sasl", "PLAIN:ops",
		"-sasl-password-file", passwordFile(t, "ops:"+devSecret+"\n")}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	b, err := startBroker(cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.close)
	addr := b.c.ListenAddrs()[0]

	const guesses = 6
	start := time.Now()
	for i := range guesses {
		if plainAuth(t, addr, "127.0.0.2", "ops", fmt.Sprintf("guess-%d", i)) {
			t.Fatalf("wrong password %d accepted", i)
		}
	}
	// A lower bound: the spaces the throttle imposes between the guesses (a loaded
	// machine only adds to it).
	var least time.Duration
	for i := range guesses - 1 {
		least += min(devbroker.DefaultSASLDelay<<i, devbroker.DefaultSASLMaxDelay)
	}
	if took := time.Since(start); took < least {
		t.Fatalf("%d wrong guesses answered in %v, want at least %v between them", guesses, took, least)
	}
	if !plainAuth(t, addr, "127.0.0.3", "ops", devSecret) {
		t.Fatal("the right password refused from another address")
	}
	if !plainAuth(t, addr, "127.0.0.2", "ops", devSecret) {
		t.Fatal("the right password refused from the guessing address")
	}
}
