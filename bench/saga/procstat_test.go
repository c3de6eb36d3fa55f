package main

import (
	"os"
	"testing"
	"time"

	"github.com/choreo-saga/choreo/internal/procstat"
)

// TestProcStat: this process's CPU time grows while it computes, and its resident set
// and peak are read from /proc.
func TestProcStat(t *testing.T) {
	pid := os.Getpid()
	before, err := procstat.CPU(pid)
	if err != nil {
		t.Fatal(err)
	}
	x, deadline := 1, time.Now().Add(time.Minute)
	for {
		for i := range 1_000_000 {
			x = x*31 + i
		}
		after, err := procstat.CPU(pid)
		if err != nil {
			t.Fatal(err)
		}
		if after > before {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("CPU time stayed at %v for a minute of computing", before)
		}
	}
	_ = x
	rss, hwm, err := procstat.Memory(pid)
	if err != nil || rss <= 0 || hwm < rss {
		t.Errorf("memory: rss %d, hwm %d, err %v; want 0 < rss <= hwm", rss, hwm, err)
	}
	if la, err := loadAverage(); err != nil || la[0] < 0 {
		t.Errorf("loadAverage: %v, %v", la, err)
	}
}
