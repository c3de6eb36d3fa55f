package main

import (
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func TestProbe(t *testing.T) {
	status := http.StatusOK
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/readyz" {
			http.NotFound(w, r)
			return
		}
		w.WriteHeader(status)
		_, _ = w.Write([]byte("kafka: unreachable"))
	}))
	defer srv.Close()

	if err := probe(srv.URL+"/readyz", time.Minute); err != nil {
		t.Errorf("healthy endpoint: %v", err)
	}
	status = http.StatusServiceUnavailable
	err := probe(srv.URL+"/readyz", time.Minute)
	if err == nil || !strings.Contains(err.Error(), "503") || !strings.Contains(err.Error(), "kafka: unreachable") {
		t.Errorf("unhealthy endpoint: %v", err)
	}
	if err := probe(srv.URL+"/nope", time.Minute); err == nil {
		t.Error("404 counted as healthy")
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	if err := probe("http://"+addr+"/readyz", time.Minute); err == nil {
		t.Error("refused connection counted as healthy")
	}
	if err := probe("::bad url", time.Minute); err == nil {
		t.Error("bad URL accepted")
	}
}
