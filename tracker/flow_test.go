package tracker_test

import (
	"context"
	"encoding/xml"
	"html"
	"io"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/choreo-saga/choreo/event"
	"github.com/choreo-saga/choreo/internal/testenv"
	"github.com/choreo-saga/choreo/tracker"
)

// spaced is chain with the given gap between consecutive events.
func spaced(t *testing.T, corr string, gap time.Duration, steps ...[2]string) []event.Event {
	t.Helper()
	evs := chain(t, corr, steps...)
	for i := range evs {
		evs[i].Time = t0.Add(time.Duration(i) * gap)
	}
	return evs
}

// ingestAt indexes evs as records of topic at consecutive offsets from *next.
func ingestAt(t *testing.T, tr *tracker.Tracker, topic string, next *int64, evs ...event.Event) {
	t.Helper()
	recs := records(t, topic, evs)
	for _, r := range recs {
		r.Offset = *next
		*next++
	}
	if _, err := tr.Ingest(context.Background(), recs...); err != nil {
		t.Fatal(err)
	}
}

// The flow follows causation ids where they name an indexed event and the previous event
// of the correlation id otherwise; duplicates count once, dead letters not at all.
func TestFlow(t *testing.T) {
	ctx := context.Background()
	db := testenv.Postgres(t)
	table := testenv.Name(t, "flow")
	// The tracker's clock: an hour and a minute after the sagas, when o-late ends.
	now := t0.Add(time.Hour + time.Minute)
	tr, err := tracker.New(db, sagaConfig("orders"), tracker.WithTable(table), tracker.WithNow(func() time.Time { return now }))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tr.Close() }()
	if err := tracker.Migrate(ctx, db, table); err != nil {
		t.Fatal(err)
	}

	happy := [][2]string{{"order", "order.created"}, {"payment", "payment.authorized"},
		{"inventory", "stock.reserved"}, {"order", "order.confirmed"}}
	fast := spaced(t, "o-fast", time.Second, happy...)
	slow := spaced(t, "o-slow", 3*time.Second, happy...)
	declined := spaced(t, "o-declined", 2*time.Second,
		[2]string{"order", "order.created"}, [2]string{"payment", "payment.declined"}, [2]string{"order", "order.rejected"})
	// A saga whose events carry no causation id: each follows the one before it in time.
	loose := spaced(t, "o-loose", 5*time.Second, [2]string{"order", "order.created"}, [2]string{"payment", "payment.declined"})
	loose[1].CausationID = ""

	var off int64
	ingestAt(t, tr, "orders", &off, fast...)
	ingestAt(t, tr, "orders", &off, slow...)
	ingestAt(t, tr, "orders", &off, declined...)
	ingestAt(t, tr, "orders", &off, loose...)
	ingestAt(t, tr, "orders", &off, fast[2]) // the same event again, at a new offset: once
	dl := records(t, "orders"+tracker.DLQSuffix, []event.Event{fast[3]})[0]
	if _, err := tr.Ingest(ctx, dl); err != nil { // a dead letter: not in the flow
		t.Fatal(err)
	}

	f, err := tr.Flow(ctx)
	if err != nil {
		t.Fatal(err)
	}
	type key struct{ from, to, source string }
	got := map[key]tracker.FlowEdge{}
	for _, e := range f.Edges {
		got[key{e.From, e.To, e.Source}] = e
	}
	want := []struct {
		key
		count, caused int
		p50, p99      time.Duration
	}{
		{key{"order.created", "payment.authorized", "payment"}, 2, 2, 2 * time.Second, 2980 * time.Millisecond},
		{key{"payment.authorized", "stock.reserved", "inventory"}, 2, 2, 2 * time.Second, 2980 * time.Millisecond},
		{key{"stock.reserved", "order.confirmed", "order"}, 2, 2, 2 * time.Second, 2980 * time.Millisecond},
		{key{"order.created", "payment.declined", "payment"}, 2, 1, 3500 * time.Millisecond, 4970 * time.Millisecond},
		{key{"payment.declined", "order.rejected", "order"}, 1, 1, 2 * time.Second, 2 * time.Second},
	}
	if len(f.Edges) != len(want) {
		t.Errorf("%d edges, want %d: %+v", len(f.Edges), len(want), f.Edges)
	}
	for _, w := range want {
		e, ok := got[w.key]
		if !ok {
			t.Errorf("no edge %v", w.key)
			continue
		}
		if e.Count != w.count || e.ByCausation != w.caused || !near(e.P50, w.p50) || !near(e.P99, w.p99) {
			t.Errorf("edge %v: count %d (by causation %d), p50 %s, p99 %s; want %d (%d), %s, %s",
				w.key, e.Count, e.ByCausation, e.P50, e.P99, w.count, w.caused, w.p50, w.p99)
		}
	}
	created, ok := f.Node("order.created")
	if !ok || created.Count != 4 || created.Starts != 4 || strings.Join(created.Sources, ",") != "order" ||
		strings.Join(created.Topics, ",") != "orders" {
		t.Errorf("node order.created = %+v, %v; want 4 events, 4 starts, from order on orders", created, ok)
	}
	if n, _ := f.Node("stock.reserved"); n.Count != 2 || n.Starts != 0 {
		t.Errorf("node stock.reserved = %+v; want 2 events (the duplicate once), no start", n)
	}
	if n, _ := f.Node("order.confirmed"); n.Count != 2 {
		t.Errorf("node order.confirmed = %+v; want 2 events (the dead letter excluded)", n)
	}
	if len(f.Nodes) != 6 {
		t.Errorf("%d nodes, want 6: %+v", len(f.Nodes), f.Nodes)
	}

	// The last two minutes: only o-late, an hour after the others, whose payment.declined
	// followed its order.created by 4 s.
	late := spaced(t, "o-late", 4*time.Second, [2]string{"order", "order.created"}, [2]string{"payment", "payment.declined"})
	for i := range late {
		late[i].Time = late[i].Time.Add(time.Hour)
	}
	ingestAt(t, tr, "orders", &off, late...)
	recent, err := tr.FlowRecent(ctx, 2*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if len(recent.Nodes) != 2 || len(recent.Edges) != 1 || recent.Edges[0].From != "order.created" ||
		recent.Edges[0].To != "payment.declined" || recent.Edges[0].Count != 1 || !near(recent.Edges[0].P50, 4*time.Second) {
		t.Errorf("FlowRecent(2m) = %+v; want o-late's order.created → payment.declined", recent)
	}

	svg := string(f.SVG())
	wellFormed(t, svg)
	for _, s := range []string{"order.created", "payment ×2  p50 ", "order ×1  p50 "} {
		if !strings.Contains(svg, s) {
			t.Errorf("SVG lacks %q", s)
		}
	}
}

// near reports whether a flow percentile is within the histogram's resolution of want.
func near(got, want time.Duration) bool {
	return math.Abs(float64(got-want)) <= tracker.GapResolution*float64(want)
}

// wellFormed fails t unless doc is well-formed XML with an <svg> root.
func wellFormed(t *testing.T, doc string) {
	t.Helper()
	d := xml.NewDecoder(strings.NewReader(doc))
	root := ""
	for {
		tok, err := d.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("SVG is not well-formed XML: %v\n%s", err, doc)
		}
		if se, ok := tok.(xml.StartElement); ok && root == "" {
			root = se.Name.Local
		}
	}
	if root != "svg" {
		t.Errorf("SVG root element %q, want svg", root)
	}
}

// Labels are escaped: event types, services and topics come from the records.
func TestFlowSVGEscapes(t *testing.T) {
	evil := `x"><script>alert(1)</script>&`
	f := tracker.Flow{
		Nodes: []tracker.FlowNode{
			{Type: "a.started", Sources: []string{evil}, Topics: []string{"t"}, Count: 1, Starts: 1},
			{Type: evil, Sources: []string{"s"}, Topics: []string{evil}, Count: 1},
		},
		Edges: []tracker.FlowEdge{
			{From: "a.started", To: evil, Source: evil, Count: 1, P50: time.Millisecond},
			{From: evil, To: "a.started", Source: "s", Count: 1}, // a loop back up
		},
	}
	svg := string(f.SVG())
	wellFormed(t, svg)
	if strings.Contains(svg, "<script") || strings.Contains(svg, `x">`) {
		t.Errorf("SVG carries an unescaped label:\n%s", svg)
	}
	if !strings.Contains(svg, "&lt;script&gt;") {
		t.Errorf("SVG lacks the escaped label:\n%s", svg)
	}
	wellFormed(t, string(tracker.Flow{}.SVG()))
}

// The saga of the demo and a shipping step: 12 event types, 13 edges, loops and fan-out.
// No edge label covers another label or a box.
func TestFlowSVGLabelsDoNotOverlap(t *testing.T) {
	edges := [][3]string{
		{"order.created", "payment.authorized", "payment"}, {"order.created", "payment.declined", "payment"},
		{"order.created", "order.cancel_requested", "order"}, {"payment.authorized", "stock.reserved", "inventory"},
		{"payment.authorized", "stock.unavailable", "inventory"}, {"payment.declined", "order.rejected", "order"},
		{"stock.reserved", "order.confirmed", "order"}, {"stock.unavailable", "payment.refunded", "payment"},
		{"payment.refunded", "order.rejected", "order"}, {"payment.refunded", "order.cancelled", "order"},
		{"order.cancel_requested", "payment.refunded", "payment"}, {"order.cancel_requested", "stock.released", "inventory"},
		{"order.confirmed", "shipment.scheduled", "shipping"},
	}
	var f tracker.Flow
	nodes := map[string]*tracker.FlowNode{}
	for i, e := range edges {
		f.Edges = append(f.Edges, tracker.FlowEdge{From: e[0], To: e[1], Source: e[2], Count: 100 + i,
			P50: time.Duration(i+1) * 12345 * time.Microsecond, P99: time.Duration(i+1) * 98765 * time.Microsecond})
		for j, typ := range e[:2] {
			if nodes[typ] == nil {
				nodes[typ] = &tracker.FlowNode{Type: typ, Sources: []string{strings.SplitN(typ, ".", 2)[0]}, Count: 100}
			}
			if j == 0 && typ == "order.created" {
				nodes[typ].Starts = 100
			}
		}
	}
	for _, n := range nodes {
		f.Nodes = append(f.Nodes, *n)
	}
	slices.SortFunc(f.Nodes, func(a, b tracker.FlowNode) int { return strings.Compare(a.Type, b.Type) })
	if len(f.Nodes) != 12 {
		t.Fatalf("%d event types, want 12", len(f.Nodes))
	}
	svg := string(f.SVG())
	wellFormed(t, svg)

	type rect struct {
		name           string
		x0, y0, x1, y1 float64
	}
	num := func(s string) float64 {
		v, err := strconv.ParseFloat(s, 64)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	var rects []rect
	for _, m := range regexp.MustCompile(`<text x="([0-9.]+)" y="([0-9.]+)" text-anchor="middle" font-size="10"[^>]*>([^<]*)</text>`).FindAllStringSubmatch(svg, -1) {
		x, y, half := num(m[1]), num(m[2]), 6.0*float64(len([]rune(html.UnescapeString(m[3]))))/2
		rects = append(rects, rect{"label " + m[3], x - half, y - 10, x + half, y + 3})
	}
	if len(rects) != len(edges) {
		t.Fatalf("%d edge labels, want %d", len(rects), len(edges))
	}
	for _, m := range regexp.MustCompile(`<rect x="([0-9.]+)" y="([0-9.]+)" width="([0-9.]+)" height="([0-9.]+)"`).FindAllStringSubmatch(svg, -1) {
		x, y := num(m[1]), num(m[2])
		rects = append(rects, rect{"box", x, y, x + num(m[3]), y + num(m[4])})
	}
	for i, a := range rects {
		for _, b := range rects[i+1:] {
			if a.x0 < b.x1 && b.x0 < a.x1 && a.y0 < b.y1 && b.y0 < a.y1 && !(a.name == "box" && b.name == "box") {
				t.Errorf("%s %v overlaps %s %v", a.name, a, b.name, b)
			}
		}
	}
	if t.Failed() {
		t.Logf("SVG:\n%s", svg)
	}
}
