package tracker

import (
	"bytes"
	"cmp"
	"fmt"
	"html"
	"math"
	"slices"
	"strings"
	"time"
)

// Layout of Flow.SVG, in SVG user units.
const (
	svgCharW      = 7.0 // width of one character of the 12px monospace font
	svgLabelCharW = 6.0 // of the 10px one of edge labels
	svgBoxH       = 44.0
	svgBoxPadX    = 12.0
	svgGapX       = 48.0  // between two boxes of a layer
	svgLayerH     = 120.0 // from one layer's top to the next one's
	svgMargin     = 24.0
	svgLoopW      = 60.0 // how far right of its boxes an edge that goes back up bends
	svgLabelH     = 13.0 // height of an edge label's line, baseline to baseline
)

type svgBox struct {
	x, y, w float64 // top-left corner and width
	layer   int
}

// svgEdge is an edge laid out: its path, label and where the label's middle goes.
type svgEdge struct {
	FlowEdge
	d, label string
	lx, ly   float64
}

// SVG draws the flow as a self-contained SVG document (no script, no external resource):
// one box per event type with its services and count, laid out in layers by the shortest
// distance from the types that start sagas, and one arrow per edge labelled with the
// producing service, count and p50/p99 gap. Every label is escaped.
func (f Flow) SVG() []byte {
	layers := f.layers()
	boxes := map[string]*svgBox{}
	width := 0.0
	for li, types := range layers {
		x := svgMargin
		for _, typ := range types {
			n, _ := f.Node(typ)
			w := svgBoxPadX*2 + svgCharW*float64(max(len(n.Type), len(nodeSubtitle(n))))
			boxes[typ] = &svgBox{x: x, y: svgMargin + float64(li)*svgLayerH, w: w, layer: li}
			x += w + svgGapX
		}
		width = max(width, x-svgGapX+svgMargin)
	}
	height := svgMargin*2 + float64(max(len(layers)-1, 0))*svgLayerH + svgBoxH

	var edges []svgEdge
	for i, e := range f.Edges {
		from, to := boxes[e.From], boxes[e.To]
		if from == nil || to == nil {
			continue
		}
		se := svgEdge{FlowEdge: e,
			label: fmt.Sprintf("%s ×%d  p50 %s p99 %s", e.Source, e.Count, shortGap(e.P50), shortGap(e.P99))}
		if to.layer > from.layer { // down: bottom centre to top centre
			x1, y1 := from.x+from.w/2, from.y+svgBoxH
			x2, y2 := to.x+to.w/2, to.y
			my := (y1 + y2) / 2
			se.d = fmt.Sprintf("M%.1f,%.1f C%.1f,%.1f %.1f,%.1f %.1f,%.1f", x1, y1, x1, my, x2, my, x2, y2)
			se.lx, se.ly = (x1+x2)/2, my
		} else { // the same layer or back up (a loop): out of the right side and back in
			x1, y1 := from.x+from.w, from.y+svgBoxH*0.65
			x2, y2 := to.x+to.w, to.y+svgBoxH*0.35
			cx := max(x1, x2) + svgLoopW
			se.d = fmt.Sprintf("M%.1f,%.1f C%.1f,%.1f %.1f,%.1f %.1f,%.1f", x1, y1, cx, y1, cx, y2, x2, y2)
			se.lx, se.ly = cx-svgLoopW/4, (y1+y2)/2
		}
		// Alternate labels of neighbouring edges above and below the curve's middle, and
		// keep every label inside the picture, which grows to the right to hold it.
		se.ly += float64(i%2)*14 - 4
		half := svgLabelCharW * float64(len([]rune(se.label))) / 2
		se.lx = max(se.lx, half+4)
		width = max(width, se.lx+half+svgMargin)
		edges = append(edges, se)
	}
	for _, e := range placeLabels(edges, boxes) {
		height = max(height, e.ly+svgMargin)
	}

	var b bytes.Buffer
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" viewBox="0 0 %.0f %.0f" font-family="monospace" font-size="12">`+"\n",
		width, height, width, height)
	b.WriteString(`<title>observed saga flow</title>
<defs><marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" markerUnits="userSpaceOnUse" markerWidth="10" markerHeight="10" orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" fill="#555"/></marker></defs>
<rect width="100%" height="100%" fill="#fff"/>
`)
	if len(f.Nodes) == 0 {
		fmt.Fprintf(&b, `<text x="%.0f" y="%.0f">no events indexed</text>`+"\n", svgMargin, svgMargin+12)
	}
	for _, e := range edges { // the arrows first, so that no arrow runs over a label
		fmt.Fprintf(&b, `<path class="edge" d="%s" fill="none" stroke="#555" stroke-width="%.1f" marker-end="url(#arrow)"><title>%s → %s by %s: %d (by causation %d), p50 %s, p99 %s</title></path>`+"\n",
			e.d, 1+math.Min(3, math.Log10(float64(max(e.Count, 1)))),
			esc(e.From), esc(e.To), esc(e.Source), e.Count, e.ByCausation, shortGap(e.P50), shortGap(e.P99))
	}
	for _, e := range edges {
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle" font-size="10" fill="#333" stroke="#fff" stroke-width="3" paint-order="stroke">%s</text>`+"\n",
			e.lx, e.ly, esc(e.label))
	}
	for _, n := range f.Nodes {
		bx := boxes[n.Type]
		fill := "#eef3fb"
		if n.Starts > 0 {
			fill = "#e6f4ea"
		}
		fmt.Fprintf(&b, `<g class="node"><title>%s: %d events from %s on %s</title>`,
			esc(n.Type), n.Count, esc(strings.Join(n.Sources, ", ")), esc(strings.Join(n.Topics, ", ")))
		fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.0f" rx="6" fill="%s" stroke="#4a6fa5"/>`,
			bx.x, bx.y, bx.w, svgBoxH, fill)
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle" font-weight="bold">%s</text>`,
			bx.x+bx.w/2, bx.y+18, esc(n.Type))
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle" fill="#555">%s</text></g>`+"\n",
			bx.x+bx.w/2, bx.y+35, esc(nodeSubtitle(n)))
	}
	b.WriteString("</svg>\n")
	return b.Bytes()
}

// svgRect is an axis-aligned rectangle: left, top, right, bottom.
type svgRect struct{ x0, y0, x1, y1 float64 }

func (r svgRect) overlaps(o svgRect) bool {
	return r.x0 < o.x1 && o.x0 < r.x1 && r.y0 < o.y1 && o.y0 < r.y1
}

// labelRect is the box an edge label's text covers (ly is its baseline).
func labelRect(e svgEdge) svgRect {
	half := svgLabelCharW * float64(len([]rune(e.label))) / 2
	return svgRect{e.lx - half, e.ly - svgLabelH + 3, e.lx + half, e.ly + 3}
}

// placeLabels moves edge labels down, one line at a time, until none covers another
// label or a box, the labels nearest the top first; it returns the edges.
func placeLabels(edges []svgEdge, boxes map[string]*svgBox) []svgEdge {
	var taken []svgRect
	for _, b := range boxes {
		taken = append(taken, svgRect{b.x, b.y, b.x + b.w, b.y + svgBoxH})
	}
	order := make([]int, len(edges))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int {
		return cmp.Or(cmp.Compare(edges[a].ly, edges[b].ly), cmp.Compare(edges[a].lx, edges[b].lx))
	})
	for _, i := range order {
		for slices.ContainsFunc(taken, labelRect(edges[i]).overlaps) {
			edges[i].ly += svgLabelH
		}
		taken = append(taken, labelRect(edges[i]))
	}
	return edges
}

// nodeSubtitle is a box's second line: who produces the type and how many were seen.
func nodeSubtitle(n FlowNode) string {
	return fmt.Sprintf("%s ×%d", strings.Join(n.Sources, ", "), n.Count)
}

func esc(s string) string { return html.EscapeString(s) }

// shortGap formats a gap with two or three significant digits: 850µs, 12ms, 1.5s.
func shortGap(d time.Duration) string {
	switch a := d.Abs(); {
	case a < time.Millisecond:
		return d.Round(time.Microsecond).String()
	case a < time.Second:
		return d.Round(100 * time.Microsecond).String()
	case a < time.Minute:
		return d.Round(10 * time.Millisecond).String()
	default:
		return d.Round(time.Second).String()
	}
}

// layers assigns every node a layer: its shortest distance along edges from the types
// that start sagas (or, where a part of the graph has none, from its first type). Within
// a layer, types are ordered by the mean position of their predecessors, then by name, so
// that arrows cross less.
func (f Flow) layers() [][]string {
	next := map[string][]string{}
	prev := map[string][]string{}
	for _, e := range f.Edges {
		next[e.From] = append(next[e.From], e.To)
		prev[e.To] = append(prev[e.To], e.From)
	}
	layer := map[string]int{}
	bfs := func(roots []string, base int) {
		queue := roots
		for _, r := range roots {
			layer[r] = base
		}
		for len(queue) > 0 {
			n := queue[0]
			queue = queue[1:]
			for _, m := range next[n] {
				if _, seen := layer[m]; !seen {
					layer[m] = layer[n] + 1
					queue = append(queue, m)
				}
			}
		}
	}
	var roots []string
	for _, n := range f.Nodes {
		if n.Starts > 0 || len(prev[n.Type]) == 0 {
			roots = append(roots, n.Type)
		}
	}
	bfs(roots, 0)
	for _, n := range f.Nodes {
		if _, seen := layer[n.Type]; !seen {
			bfs([]string{n.Type}, 0)
		}
	}
	depth := 0
	for _, l := range layer {
		depth = max(depth, l+1)
	}
	out := make([][]string, depth)
	for _, n := range f.Nodes { // in type order
		out[layer[n.Type]] = append(out[layer[n.Type]], n.Type)
	}
	pos := map[string]float64{}
	for li, types := range out {
		key := map[string]float64{}
		for i, typ := range types {
			sum, k := 0.0, 0
			for _, p := range prev[typ] {
				if layer[p] < li {
					sum += pos[p]
					k++
				}
			}
			key[typ] = float64(i)
			if k > 0 {
				key[typ] = sum / float64(k)
			}
		}
		slices.SortStableFunc(types, func(a, b string) int {
			return cmp.Or(cmp.Compare(key[a], key[b]), strings.Compare(a, b))
		})
		for i, typ := range types {
			pos[typ] = float64(i)
		}
	}
	return out
}
