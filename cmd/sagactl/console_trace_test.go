package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"
)

// jaegerFixture is a stuck order's trace as Jaeger v2's query API returned it
// (GET /api/traces/{id}) during make demo TRACES=1: 27 spans of the order, payment and
// inventory services, one of them (payment's redis.pipeline client) with an error.
const jaegerFixture = "testdata/jaeger_trace.json"

// fakeJaeger serves body for GET /api/traces/{id} of traceID and 404 for any other id.
func fakeJaeger(t *testing.T, traceID string, body []byte) *httptest.Server {
	t.Helper()
	mux := http.NewServeMux()
	mux.HandleFunc("GET /api/traces/{id}", func(w http.ResponseWriter, r *http.Request) {
		if r.PathValue("id") != traceID {
			http.Error(w, `{"data":null,"errors":[{"code":404,"msg":"trace not found"}]}`, http.StatusNotFound)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(body)
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}

// fakeOrderWithTrace answers GET /orders/{id} for one order carrying traceID.
func fakeOrderWithTrace(t *testing.T, traceID string) *httptest.Server {
	t.Helper()
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	o := Order{ID: "o-trace", CustomerID: "c-1", State: "PENDING", Stuck: true, CreatedAt: at, StateSince: at, TraceID: traceID,
		History: []Transition{{To: "PENDING", CauseEventType: "command.create", At: at}}}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /orders/{id}", func(w http.ResponseWriter, r *http.Request) { _ = json.NewEncoder(w).Encode(o) })
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}

func loadJaegerFixture(t *testing.T) ([]byte, jaegerTrace) {
	t.Helper()
	body, err := os.ReadFile(jaegerFixture)
	if err != nil {
		t.Fatal(err)
	}
	var d struct{ Data []jaegerTrace }
	if err := json.Unmarshal(body, &d); err != nil || len(d.Data) != 1 {
		t.Fatalf("fixture: %v, %d traces", err, len(d.Data))
	}
	return body, d.Data[0]
}

func traceConsole(t *testing.T, orderURL, jaegerURL, uiURL string) http.Handler {
	t.Helper()
	c := conn{orderURL: orderURL, brokers: "127.0.0.1:1", timeout: 10 * time.Second, kafkaSec: kafkaSecFlags{}}
	s, err := newConsole(c, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.close)
	if s.jaeger, err = newJaegerClient(jaegerURL, uiURL, c.timeout); err != nil {
		t.Fatal(err)
	}
	return s.handler()
}

func TestConsoleOrderPageDrawsTraceWaterfall(t *testing.T) {
	body, tr := loadJaegerFixture(t)
	// A hostile operation name: the page must carry it escaped.
	body = []byte(strings.Replace(string(body), `"operationName":"`, `"operationName":"<script>alert(1)</script>`, 1))
	jg := fakeJaeger(t, tr.TraceID, body)
	orders := fakeOrderWithTrace(t, tr.TraceID)

	for _, ui := range []string{"", "http://jaeger.example:16686"} {
		rec := consoleGet(t, traceConsole(t, orders.URL, jg.URL, ui), "/orders/o-trace")
		page := rec.Body.String()
		if rec.Code != http.StatusOK || !strings.Contains(page, `id="trace-waterfall"`) {
			t.Fatalf("ui %q: status %d, no waterfall:\n%s", ui, rec.Code, page)
		}
		for _, svc := range []string{"order", "payment"} {
			if !strings.Contains(page, `data-service="`+svc+`"`) {
				t.Errorf("ui %q: no span of %s in the waterfall", ui, svc)
			}
		}
		if got := strings.Count(page, `<g class="span `); got != len(tr.Spans) {
			t.Errorf("ui %q: %d span rows, the trace has %d spans", ui, got, len(tr.Spans))
		}
		if strings.Contains(page, "<script>alert(1)") || !strings.Contains(page, "&lt;script&gt;alert(1)") {
			t.Errorf("ui %q: the operation name is not escaped", ui)
		}
		link := `href="` + ui + `/trace/` + tr.TraceID + `"`
		if has := strings.Contains(page, `id="trace-ui-link"`); has != (ui != "") || (ui != "" && !strings.Contains(page, link)) {
			t.Errorf("ui %q: Jaeger UI link present %v, want %v (%s)", ui, has, ui != "", link)
		}
	}
}

func TestConsoleTraceWaterfallReportsMissingTrace(t *testing.T) {
	jg := fakeJaeger(t, "00000000000000000000000000000001", []byte(`{"data":[]}`))
	orders := fakeOrderWithTrace(t, "4bf92f3577b34da6a3ce929d0e0e4736")
	page := consoleGet(t, traceConsole(t, orders.URL, jg.URL, ""), "/orders/o-trace").Body.String()
	if !strings.Contains(page, `id="trace-error"`) || !strings.Contains(page, errNoTrace.Error()) || strings.Contains(page, `id="trace-waterfall"`) {
		t.Fatalf("a trace Jaeger does not have: want the error, no waterfall:\n%s", page)
	}
	// Without -jaeger-query the page has no trace section at all.
	page = consoleGet(t, traceConsole(t, orders.URL, "", ""), "/orders/o-trace").Body.String()
	if strings.Contains(page, `id="trace-error"`) || strings.Contains(page, `id="trace-waterfall"`) {
		t.Fatal("a trace section without -jaeger-query")
	}
}

func TestBuildWaterfallNestsAndBounds(t *testing.T) {
	_, tr := loadJaegerFixture(t)
	w := buildWaterfall(tr)
	if w.Total != len(tr.Spans) || w.Drawn != len(tr.Spans) || len(w.Rows) != len(tr.Spans) {
		t.Fatalf("total %d drawn %d rows %d, trace has %d spans", w.Total, w.Drawn, len(w.Rows), len(tr.Spans))
	}
	// The first row is the earliest root; every other row is indented under a parent.
	if w.Rows[0].LabelX != 8 || w.Rows[0].Offset != "+"+fmtDuration(0) {
		t.Errorf("first row: label x %d, offset %s", w.Rows[0].LabelX, w.Rows[0].Offset)
	}
	nested, failed := 0, 0
	for _, r := range w.Rows {
		if r.LabelX > 8 {
			nested++
		}
		if strings.HasSuffix(r.Class, " err") {
			failed++
		}
		if r.BarX < wfLabelW || r.BarX+r.BarW > wfLabelW+wfBarsW {
			t.Errorf("bar of %s %s at %d+%d outside the bar area", r.Service, r.Operation, r.BarX, r.BarW)
		}
	}
	if nested == 0 || failed != 1 {
		t.Errorf("%d spans drawn nested under their parent (want some), %d marked failed (want 1)", nested, failed)
	}

	// A long chain (each span the child of the previous) is cut to consoleTraceSpans rows
	// and indented at most consoleTraceMaxDepth levels.
	var long jaegerTrace
	long.Processes = map[string]jaegerProcess{"p1": {ServiceName: "order"}}
	for i := range consoleTraceSpans + 50 {
		sp := tr.Spans[0]
		sp.SpanID, sp.StartTime, sp.Duration, sp.ProcessID = fmt.Sprintf("s%d", i), int64(1_000_000+i), 10, "p1"
		sp.References = nil
		if i > 0 {
			sp.References = []jaegerRef{{RefType: "CHILD_OF", SpanID: fmt.Sprintf("s%d", i-1)}}
		}
		long.Spans = append(long.Spans, sp)
	}
	w = buildWaterfall(long)
	if w.Total != consoleTraceSpans+50 || w.Drawn != consoleTraceSpans || len(w.Rows) != consoleTraceSpans {
		t.Fatalf("total %d drawn %d rows %d", w.Total, w.Drawn, len(w.Rows))
	}
	if maxX := 8 + consoleTraceMaxDepth*wfIndent; w.Rows[len(w.Rows)-1].LabelX != maxX {
		t.Errorf("deepest row at label x %d, want %d", w.Rows[len(w.Rows)-1].LabelX, maxX)
	}
}
