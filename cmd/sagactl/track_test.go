package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/choreo-saga/choreo/event"
	"github.com/choreo-saga/choreo/internal/asyncapi"
	"github.com/choreo-saga/choreo/internal/testenv"
	"github.com/choreo-saga/choreo/tracker"
)

// syncBuffer is a bytes.Buffer safe for the concurrent writes of a running command.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestTrack runs "sagactl track" on the shipping saga's declaration with its topics
// renamed, produces a shipping saga that never gets its shipment and one that does, and
// reads them back with "track stuck", "track list" and "track saga".
func TestTrack(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dsn := testenv.PostgresDSN(t)
	brokers := testenv.Kafka(t)
	topic := testenv.Topic(t, brokers, 1)

	cfg, err := tracker.LoadConfig("../../deploy/tracker/shipping.json")
	if err != nil {
		t.Fatal(err)
	}
	cfg.Topics = []string{topic}
	b, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	file := t.TempDir() + "/sagas.json"
	if err := os.WriteFile(file, b, 0o600); err != nil {
		t.Fatal(err)
	}

	// Events of five minutes ago: the 30 s window of the waiting saga has passed.
	base := time.Now().Add(-5 * time.Minute).UTC()
	var recs []*kgo.Record
	for i, ev := range [][3]string{
		{"order", "order.confirmed", "o-waiting"},
		{"order", "order.confirmed", "o-shipped"},
		{"shipping", "shipment.scheduled", "o-shipped"},
	} {
		e, err := event.New(ev[0], ev[1], ev[2], nil)
		if err != nil {
			t.Fatal(err)
		}
		e.Time = base.Add(time.Duration(i) * time.Second)
		r, err := event.ToRecord(topic, e)
		if err != nil {
			t.Fatal(err)
		}
		recs = append(recs, r)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}

	env := map[string]string{"DATABASE_URL": dsn, "KAFKA_BROKERS": strings.Join(brokers, ","), "TRACKER_CONFIG": file}
	std := func(out, errb interface{ Write([]byte) (int, error) }) stdio {
		return stdio{out: out, err: errb, getenv: func(k string) string { return env[k] }}
	}
	var runOut, runErr syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"track", "-group", testenv.Name(t, "g"), "-refresh", "100ms"}, std(&runOut, &runErr))
	}()
	query := func(args ...string) (int, string, string) {
		var out, errb bytes.Buffer
		code := run(ctx, append([]string{"track"}, args...), std(&out, &errb))
		return code, out.String(), errb.String()
	}
	testenv.Eventually(t, testenv.Timeout, "both shipping sagas indexed", func() bool {
		code, out, _ := query("list", "-json")
		var s []tracker.Summary
		return code == exitOK && json.Unmarshal([]byte(out), &s) == nil && len(s) == 2
	})

	code, out, errs := query("stuck")
	if code != exitOK {
		t.Fatalf("track stuck: exit %d: %s", code, errs)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 || !strings.Contains(lines[1], "o-waiting") || !strings.Contains(lines[1], "schedule shipment") ||
		!strings.Contains(lines[1], "shipping") || !strings.Contains(lines[1], "order.confirmed") {
		t.Fatalf("track stuck:\n%s", out)
	}
	code, out, errs = query("list", "-status", "completed")
	if code != exitOK || !strings.Contains(out, "o-shipped") || strings.Contains(out, "o-waiting") {
		t.Fatalf("track list -status completed: exit %d: %s%s", code, out, errs)
	}
	// Flags before the subcommand, as go doc ./cmd/sagactl allows.
	code, out, errs = query("-db", dsn, "-status", "completed", "list")
	if code != exitOK || !strings.Contains(out, "o-shipped") || strings.Contains(out, "o-waiting") {
		t.Fatalf("track -db … -status completed list: exit %d: %s%s", code, out, errs)
	}
	if code, _, errs := query("-svg", "x.svg", "list"); code != exitUsage || !strings.Contains(errs, "-svg only applies to track flow") {
		t.Fatalf("track -svg … list: exit %d: %s", code, errs)
	}
	code, out, errs = query("saga", "o-waiting")
	if code != exitOK || !strings.Contains(out, "shipping saga o-waiting: stuck, waiting for shipping to answer order.confirmed") {
		t.Fatalf("track saga: exit %d: %s%s", code, out, errs)
	}
	svgFile, aaFile := t.TempDir()+"/flow.svg", t.TempDir()+"/asyncapi.json"
	var flowOut, flowErr bytes.Buffer
	if code := run(ctx, []string{"flow", "-svg", svgFile, "-asyncapi", aaFile}, std(&flowOut, &flowErr)); code != exitOK {
		t.Fatalf("flow: exit %d: %s", code, flowErr.String())
	}
	if !regexp.MustCompile(`order\.confirmed\s+→\s+shipment\.scheduled\s+shipping\s+1\s+0\s`).MatchString(flowOut.String()) ||
		!strings.Contains(flowOut.String(), "starts: order.confirmed (2, by order)") {
		t.Errorf("flow printed:\n%s", flowOut.String())
	}
	flowOut.Reset()
	// The events are five minutes old: none in the last minute, all in the last ten.
	if code := run(ctx, []string{"flow", "-last", "1m"}, std(&flowOut, &flowErr)); code != exitOK ||
		!strings.Contains(flowOut.String(), "no events indexed") {
		t.Errorf("flow -last 1m: exit %d:\n%s%s", code, flowOut.String(), flowErr.String())
	}
	flowOut.Reset()
	if code := run(ctx, []string{"flow", "-last", "10m"}, std(&flowOut, &flowErr)); code != exitOK ||
		!strings.Contains(flowOut.String(), "starts: order.confirmed (2, by order)") {
		t.Errorf("flow -last 10m: exit %d:\n%s%s", code, flowOut.String(), flowErr.String())
	}
	if b, err := os.ReadFile(svgFile); err != nil || !bytes.Contains(b, []byte("<svg")) || !bytes.Contains(b, []byte("shipment.scheduled")) {
		t.Errorf("flow -svg wrote %d bytes (%v)", len(b), err)
	}
	if b, err := os.ReadFile(aaFile); err != nil {
		t.Error(err)
	} else if err := asyncapi.Validate(b); err != nil || !bytes.Contains(b, []byte(`"shipping sends shipment.scheduled on `+topic+`"`)) {
		t.Errorf("flow -asyncapi: %v\n%s", err, b)
	}
	if code, _, _ := query("saga", "nobody"); code == exitOK {
		t.Fatal("track saga of an unknown id succeeded")
	}
	if code, _, errs := query("list", "-status", "bogus"); code != exitUsage {
		t.Fatalf("track list -status bogus: exit %d: %s", code, errs)
	}

	cancel()
	if code := <-done; code != exitOK {
		t.Fatalf("track run: exit %d: %s", code, runErr.String())
	}
	if !strings.Contains(runOut.String(), "indexing "+topic+","+topic+".dlq") {
		t.Fatalf("track run said: %s", runOut.String())
	}
}
