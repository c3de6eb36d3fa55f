package main

import (
	"bytes"
	"fmt"
)

// plotSVG draws three panels over time (plain SVG): RSS per process, size of each
// table, and p50/p99 POST→terminal latency per minute, with a hold run's hold shaded.
func plotSVG(r *results) []byte {
	const pw, ph, pad = 520.0, 300.0, 50.0
	var b bytes.Buffer
	w, h := 3*(pw+pad)+pad, ph+2*pad+160
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" viewBox="0 0 %.0f %.0f" font-family="sans-serif" font-size="11">`+"\n", w, h, w, h)
	b.WriteString(`<rect width="100%" height="100%" fill="white"/>` + "\n")
	colors := []string{"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"}
	type series struct {
		name string
		x, y []float64
	}
	panel := func(i int, title, unit string, ss []series) {
		x0, y0 := pad+float64(i)*(pw+pad), pad
		var xmax, ymax float64
		for _, s := range ss {
			for j := range s.x {
				xmax, ymax = max(xmax, s.x[j]), max(ymax, s.y[j])
			}
		}
		if xmax == 0 {
			xmax = 1
		}
		if ymax == 0 {
			ymax = 1
		}
		ymax *= 1.1
		if h := r.Hold; h != nil && h.ReleaseSeconds > h.AtSeconds { // the hold's interval, shaded
			x1, x2 := x0+pw*min(h.AtSeconds/60/xmax, 1), x0+pw*min(h.ReleaseSeconds/60/xmax, 1)
			fmt.Fprintf(&b, `<rect x="%.1f" y="%.0f" width="%.1f" height="%.0f" fill="#fbe3e3"/><text x="%.1f" y="%.0f" fill="#b55">snapshot held</text>`+"\n",
				x1, y0, x2-x1, ph, x1+3, y0+26)
		}
		fmt.Fprintf(&b, `<text x="%.0f" y="%.0f" font-size="13">%s</text>`+"\n", x0, y0-20, title)
		fmt.Fprintf(&b, `<rect x="%.0f" y="%.0f" width="%.0f" height="%.0f" fill="none" stroke="#999"/>`+"\n", x0, y0, pw, ph)
		fmt.Fprintf(&b, `<text x="%.0f" y="%.0f">%.3g %s</text><text x="%.0f" y="%.0f">0</text>`+"\n", x0+2, y0+12, ymax, unit, x0+2, y0+ph-2)
		fmt.Fprintf(&b, `<text x="%.0f" y="%.0f" text-anchor="end">%.1f min</text>`+"\n", x0+pw, y0+ph+14, xmax)
		for k, s := range ss {
			c := colors[k%len(colors)]
			b.WriteString(`<polyline fill="none" stroke-width="1.5" stroke="` + c + `" points="`)
			for j := range s.x {
				fmt.Fprintf(&b, "%.1f,%.1f ", x0+pw*s.x[j]/xmax, y0+ph-ph*s.y[j]/ymax)
			}
			b.WriteString(`"/>` + "\n")
			fmt.Fprintf(&b, `<text x="%.0f" y="%.0f" fill="%s">%s</text>`+"\n", x0+float64(k%2)*pw/2, y0+ph+30+float64(k/2)*13, c, s.name)
		}
	}
	var rss, tables []series
	if len(r.Samples) > 0 {
		for _, name := range sortedKeys(r.Samples[0].RSSMiB) {
			s := series{name: name}
			for _, sm := range r.Samples {
				s.x, s.y = append(s.x, sm.T/60), append(s.y, sm.RSSMiB[name])
			}
			rss = append(rss, s)
		}
		for _, name := range sortedKeys(r.Samples[len(r.Samples)-1].Tables) {
			s := series{name: name}
			for _, sm := range r.Samples {
				s.x, s.y = append(s.x, sm.T/60), append(s.y, float64(sm.Tables[name].Bytes)/(1<<20))
			}
			tables = append(tables, s)
		}
	}
	p50, p99 := series{name: "p50"}, series{name: "p99"}
	for _, m := range r.Minutes {
		p50.x, p50.y = append(p50.x, float64(m.Minute)+0.5), append(p50.y, m.P50ms)
		p99.x, p99.y = append(p99.x, float64(m.Minute)+0.5), append(p99.y, m.P99ms)
	}
	panel(0, fmt.Sprintf("RSS per process (%d orders/s offered)", r.Rate), "MiB", rss)
	panel(1, "pg_total_relation_size per table", "MiB", tables)
	panel(2, "POST→terminal latency per minute", "ms", []series{p50, p99})
	b.WriteString("</svg>\n")
	return b.Bytes()
}
