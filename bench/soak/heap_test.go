package main

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"net/http/pprof"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/choreo-saga/choreo/chaos"
)

// TestSaveHeaps: an instance's heap profile is saved from its admin listener (named in
// its log) as gzip'd protobuf, and its runtime.MemStats figures are read from the text
// profile; two points print the pprof command that compares them.
func TestSaveHeaps(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	srv := httptest.NewServer(mux)
	defer srv.Close()
	dir := t.TempDir()
	logPath := filepath.Join(dir, "order-1.log")
	line := `{"level":"INFO","msg":"app: started","admin_addr":"` + strings.TrimPrefix(srv.URL, "http://") + `"}` + "\n"
	if err := os.WriteFile(logPath, []byte(line), 0o644); err != nil {
		t.Fatal(err)
	}
	in := []chaos.Instance{{Service: "order", Name: "order-1", LogPath: logPath}}
	var hs []heapPoint
	for _, point := range []string{"warmup", "end"} {
		h, err := saveHeaps(context.Background(), in, filepath.Join(dir, "prof"), point, 1)
		if err != nil {
			t.Fatal(err)
		}
		hs = append(hs, h...)
	}
	if len(hs) != 2 {
		t.Fatalf("points %+v, want 2", hs)
	}
	for _, h := range hs {
		b, err := os.ReadFile(h.Profile)
		if err != nil || !bytes.HasPrefix(b, []byte{0x1f, 0x8b}) {
			t.Errorf("%s: %v, want a gzip'd profile", h.Profile, err)
		}
		if m := h.memStats; m.HeapInuse == 0 || m.HeapAlloc == 0 || m.HeapSys < m.HeapInuse || m.StackInuse == 0 || m.Sys < m.HeapSys {
			t.Errorf("%+v, want every runtime.MemStats field read", h)
		}
	}
	var b strings.Builder
	printHeap(&b, hs)
	if want := "go tool pprof -base " + hs[0].Profile + " " + hs[1].Profile; !strings.Contains(b.String(), want) {
		t.Errorf("printed:\n%s\nwant %q", b.String(), want)
	}
}
