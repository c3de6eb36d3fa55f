package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/choreo-saga/choreo/internal/testenv/faultproxy"
)

// connRecorder records the remote address of every connection a client opens.
type connRecorder struct {
	mu    sync.Mutex
	addrs []string
}

func (r *connRecorder) OnBrokerConnect(_ kgo.BrokerMetadata, _ time.Duration, c net.Conn, err error) {
	if err != nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.addrs = append(r.addrs, c.RemoteAddr().String())
}

func (r *connRecorder) all() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.addrs...)
}

// With -advertise pointing at a fault proxy in front of the broker, a client
// bootstrapped through the proxy makes every connection through it (metadata, produce,
// the group coordinator, fetches), and loses the broker when the proxy goes down.
func TestAdvertiseRoutesEveryConnectionThroughTheProxy(t *testing.T) {
	const topic, group = "orders.events", "order-service"
	port := freePort(t)
	px, err := faultproxy.Start("127.0.0.1:0", "127.0.0.1:"+strconv.Itoa(port))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { px.Close() })
	cfg, err := parseFlags([]string{"-port", strconv.Itoa(port), "-advertise", px.Addr(), "-data-dir", "",
		"-partitions", "2", "-topics", topic, "-log-level", "none"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	b, err := startBroker(cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.close)
	if _, err := seedTopics(b.c, cfg.partitions, cfg.topics); err != nil {
		t.Fatal(err)
	}
	if b.addr() != "127.0.0.1:"+strconv.Itoa(port) || b.advertised() != px.Addr() {
		t.Fatalf("listening on %s advertising %s, want 127.0.0.1:%d advertising %s", b.addr(), b.advertised(), port, px.Addr())
	}

	rec := &connRecorder{}
	cl, err := kgo.NewClient(kgo.SeedBrokers(px.Addr()), kgo.WithHooks(rec), kgo.ConsumerGroup(group),
		kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const n = 10
	for i := range n {
		r := &kgo.Record{Topic: topic, Key: fmt.Appendf(nil, "k%d", i), Value: []byte("v")}
		if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatalf("produce through the proxy: %v", err)
		}
	}
	got := 0
	for got < n {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("consumed %d of %d records through the proxy: %v", got, n, ctx.Err())
		}
		got += len(fs.Records())
	}
	if err := cl.CommitUncommittedOffsets(ctx); err != nil {
		t.Fatalf("commit through the proxy: %v", err)
	}

	addrs := rec.all()
	if len(addrs) < 3 {
		t.Errorf("the client opened %d connections, want at least 3 (seed, broker, coordinator or fetch): %v", len(addrs), addrs)
	}
	for _, a := range addrs {
		if a != px.Addr() {
			t.Errorf("a connection to %s, not to the proxy %s: %v", a, px.Addr(), addrs)
		}
	}
	if px.Accepted() != len(addrs) {
		t.Errorf("the proxy accepted %d connections, the client opened %d", px.Accepted(), len(addrs))
	}

	// Cut the proxy: the client, whose connections all run through it, loses the broker.
	px.Set(faultproxy.Faults{Down: true})
	cctx, ccancel := context.WithTimeout(ctx, 5*time.Second)
	err = cl.Ping(cctx)
	ccancel()
	if err == nil {
		t.Fatal("the broker answered with the proxy down: the client reaches it around the proxy")
	}
	px.Clear()
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Value: []byte("back")}).FirstErr(); err != nil {
		t.Fatalf("produce after the proxy came back: %v", err)
	}
	for _, a := range rec.all() {
		if a != px.Addr() {
			t.Errorf("a connection to %s after the cut, not to the proxy %s", a, px.Addr())
		}
	}
}
