package main

import (
	"fmt"
	"io"
	"strings"
	"time"
	"unicode/utf8"
)

// progress reports a load run's progress on w: a bar redrawn in place when w is a
// terminal, otherwise a plain line at most every plainEvery (and at the end), so logs of
// non-interactive runs stay readable.
type progress struct {
	w         io.Writer
	terminal  bool
	total     int
	start     time.Time
	lastPlain time.Time
	last      string
	drawn     int // runes of the line last drawn on the terminal
	now       func() time.Time
}

const (
	barWidth   = 30
	plainEvery = 2 * time.Second
)

func newProgress(w io.Writer, terminal bool, total int) *progress {
	now := time.Now
	return &progress{w: w, terminal: terminal, total: total, start: now(), now: now}
}

// line renders the progress text for c.
func (p *progress) line(c counts) string {
	elapsed := p.now().Sub(p.start).Round(100 * time.Millisecond)
	if c.aging > 0 {
		// Every other order settled: the run waits for the stuck one to age past the
		// order service's stuck threshold, which can take a while.
		what := "the stuck order"
		if c.aging > 1 {
			what = fmt.Sprintf("%d stuck orders", c.aging)
		}
		return fmt.Sprintf("settled %d/%d; waiting for %s to be flagged stuck  %s", c.settled, c.total, what, elapsed)
	}
	text := fmt.Sprintf("placed %d/%d  settled %d  failed %d  %s", c.placed, c.total, c.settled, c.failed, elapsed)
	if !p.terminal {
		return text
	}
	done := 0
	if c.total > 0 {
		done = barWidth * c.settled / c.total
	}
	return "[" + strings.Repeat("#", done) + strings.Repeat(".", barWidth-done) + "] " + text
}

func (p *progress) update(c counts) {
	now := p.now()
	if p.terminal {
		fmt.Fprint(p.w, p.redraw(c))
		return
	}
	l := p.line(c)
	if now.Sub(p.lastPlain) < plainEvery || l == p.last {
		return
	}
	p.lastPlain, p.last = now, l
	fmt.Fprintln(p.w, l)
}

func (p *progress) finish(c counts) {
	if p.terminal {
		fmt.Fprintln(p.w, p.redraw(c))
		return
	}
	fmt.Fprintln(p.w, p.line(c))
}

// redraw returns the terminal line for c: a carriage return, the line, and spaces over
// what is left of a longer previous one (sagactl's stderr lets CR through but escapes
// every ESC, so no erase sequence).
func (p *progress) redraw(c counts) string {
	l := p.line(c)
	n := utf8.RuneCountInString(l)
	pad := strings.Repeat(" ", max(p.drawn-n, 0))
	p.drawn = n
	return "\r" + l + pad
}
