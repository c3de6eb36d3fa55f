package main

import (
	"bytes"
	"fmt"
	"html"
	"math"
)

// The plot: two panels side by side, drawn as plain SVG (no dependencies).
// Left: confirmed/s against offered/s, with the y = x line (every offered order
// confirmed). Right: POST→terminal p50/p95/p99 against offered/s, log scale.
const (
	panelW, panelH = 420.0, 300.0
	marginL        = 64.0
	marginR        = 20.0
	marginT        = 40.0
	marginB        = 52.0
)

type series struct {
	name, color string
	dash        bool
	xs, ys      []float64
}

func plotSVG(r *results) []byte {
	// Rates none of whose orders settled within the drain have no latency to plot.
	var xs, lxs, conf, p50, p95, p99 []float64
	for _, rr := range r.Rates {
		xs = append(xs, float64(rr.Offered))
		conf = append(conf, rr.ConfirmedPerSec)
		if rr.LatencyN == 0 {
			continue
		}
		lxs = append(lxs, float64(rr.Offered))
		p50 = append(p50, max(rr.P50ms, 0.1))
		p95 = append(p95, max(rr.P95ms, 0.1))
		p99 = append(p99, max(rr.P99ms, 0.1))
	}
	xmax := niceCeil(maxOf(xs))
	var b bytes.Buffer
	w := 2*(marginL+panelW+marginR) + 10
	h := marginT + panelH + marginB + 30
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" viewBox="0 0 %.0f %.0f" font-family="sans-serif" font-size="12">`+"\n", w, h, w, h)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	title := fmt.Sprintf("whole saga, %d instance(s) per service, commit %.10s, load avg %.1f", r.Instances, r.Commit, r.LoadAvgBefore[0])
	fmt.Fprintf(&b, `<text x="%.0f" y="18" text-anchor="middle" font-size="14">%s</text>`+"\n", w/2, html.EscapeString(title))

	// Left panel: linear axes.
	ymax := niceCeil(max(maxOf(conf), xmax))
	left := panel{x0: marginL, y0: marginT, xmax: xmax, ymax: ymax, title: "confirmed orders/s vs offered/s", ylabel: "confirmed/s"}
	left.axes(&b, false)
	left.lines(&b, false, []series{
		{name: "y = x", color: "#999999", dash: true, xs: []float64{0, xmax}, ys: []float64{0, xmax}},
		{name: "confirmed/s", color: "#1f77b4", xs: xs, ys: conf},
	})

	// Right panel: log y.
	lo, hi := math.Inf(1), 0.0
	for _, s := range [][]float64{p50, p95, p99} {
		for _, v := range s {
			lo, hi = math.Min(lo, v), math.Max(hi, v)
		}
	}
	if len(lxs) == 0 {
		lo, hi = 1, 10
	}
	right := panel{x0: marginL + panelW + marginR + 10 + marginL, y0: marginT, xmax: xmax,
		ymin: math.Pow(10, math.Floor(math.Log10(lo))), ymax: math.Pow(10, math.Ceil(math.Log10(hi*1.0001))),
		title: "POST to terminal event latency (ms, log; settled orders only)", ylabel: "ms"}
	right.axes(&b, true)
	right.lines(&b, true, []series{
		{name: "p50", color: "#2ca02c", xs: lxs, ys: p50},
		{name: "p95", color: "#ff7f0e", xs: lxs, ys: p95},
		{name: "p99", color: "#d62728", xs: lxs, ys: p99},
	})
	b.WriteString("</svg>\n")
	return b.Bytes()
}

type panel struct {
	x0, y0           float64
	xmax, ymin, ymax float64
	title, ylabel    string
}

func (p panel) px(x float64) float64 { return p.x0 + panelW*x/p.xmax }

func (p panel) py(y float64, log bool) float64 {
	f := y / p.ymax
	if log {
		f = (math.Log10(y) - math.Log10(p.ymin)) / (math.Log10(p.ymax) - math.Log10(p.ymin))
	}
	return p.y0 + panelH*(1-f)
}

func (p panel) axes(b *bytes.Buffer, log bool) {
	fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="middle">%s</text>`+"\n", p.x0+panelW/2, p.y0-8, html.EscapeString(p.title))
	fmt.Fprintf(b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="none" stroke="black"/>`+"\n", p.x0, p.y0, panelW, panelH)
	for i := 0; i <= 5; i++ {
		x := p.xmax * float64(i) / 5
		fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#eeeeee"/>`+"\n", p.px(x), p.y0, p.px(x), p.y0+panelH)
		fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="middle">%g</text>`+"\n", p.px(x), p.y0+panelH+16, x)
	}
	var ticks []float64
	if log {
		for v := p.ymin; v <= p.ymax*1.0001; v *= 10 {
			ticks = append(ticks, v)
		}
	} else {
		for i := 0; i <= 5; i++ {
			ticks = append(ticks, p.ymax*float64(i)/5)
		}
	}
	for _, v := range ticks {
		y := p.py(v, log)
		fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#eeeeee"/>`+"\n", p.x0, y, p.x0+panelW, y)
		fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="end">%g</text>`+"\n", p.x0-6, y+4, v)
	}
	fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="middle">offered orders/s</text>`+"\n", p.x0+panelW/2, p.y0+panelH+36)
	fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="middle" transform="rotate(-90 %.1f %.1f)">%s</text>`+"\n",
		p.x0-46, p.y0+panelH/2, p.x0-46, p.y0+panelH/2, html.EscapeString(p.ylabel))
}

func (p panel) lines(b *bytes.Buffer, log bool, ss []series) {
	for i, s := range ss {
		var pts bytes.Buffer
		for j := range s.xs {
			fmt.Fprintf(&pts, "%.1f,%.1f ", p.px(s.xs[j]), p.py(s.ys[j], log))
		}
		dash := ""
		if s.dash {
			dash = ` stroke-dasharray="5,4"`
		}
		fmt.Fprintf(b, `<polyline points="%s" fill="none" stroke="%s" stroke-width="2"%s/>`+"\n", bytes.TrimSpace(pts.Bytes()), s.color, dash)
		if !s.dash {
			for j := range s.xs {
				fmt.Fprintf(b, `<circle cx="%.1f" cy="%.1f" r="3" fill="%s"/>`+"\n", p.px(s.xs[j]), p.py(s.ys[j], log), s.color)
			}
		}
		ly := p.y0 + panelH + marginB + float64(i%4)*0 + 4
		lx := p.x0 + float64(i)*100
		fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="2"%s/>`+"\n", lx, ly, lx+20, ly, s.color, dash)
		fmt.Fprintf(b, `<text x="%.1f" y="%.1f">%s</text>`+"\n", lx+24, ly+4, html.EscapeString(s.name))
	}
}

func maxOf(v []float64) float64 {
	m := 0.0
	for _, x := range v {
		m = math.Max(m, x)
	}
	return m
}

// niceCeil rounds v up to 1, 2 or 5 times a power of ten (at least 1).
func niceCeil(v float64) float64 {
	if v <= 1 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= v {
			return m * p
		}
	}
	return 10 * p
}
