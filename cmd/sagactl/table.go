package main

import (
	"fmt"
	"io"
	"strings"
	"unicode/utf8"
)

// align is a column's alignment.
type align int

const (
	alignLeft align = iota
	alignRight
)

// table is a plain-text table: a header row, then rows, columns separated by two spaces,
// each column as wide as its widest cell. Numbers read best right-aligned, so a column
// can be set to alignRight. Cells never wrap: add escapes every control and format
// character of a cell (safeText), so a newline in a record key cannot add a row.
type table struct {
	header []string
	align  []align
	rows   [][]string
}

func newTable(header ...string) *table {
	return &table{header: header, align: make([]align, len(header))}
}

// right right-aligns the given columns.
func (t *table) right(cols ...int) *table {
	for _, c := range cols {
		if c >= 0 && c < len(t.align) {
			t.align[c] = alignRight
		}
	}
	return t
}

// add appends a row; missing cells are empty and extra cells are dropped.
func (t *table) add(cells ...string) {
	row := make([]string, len(t.header))
	for i := range row {
		if i < len(cells) {
			row[i] = safeText(cells[i])
		}
	}
	t.rows = append(t.rows, row)
}

// render writes the table to w. Lines carry no trailing spaces.
func (t *table) render(w io.Writer) error {
	width := make([]int, len(t.header))
	for _, row := range append([][]string{t.header}, t.rows...) {
		for i, c := range row {
			width[i] = max(width[i], utf8.RuneCountInString(c))
		}
	}
	var b strings.Builder
	line := func(row []string) {
		var l strings.Builder
		for i, c := range row {
			pad := strings.Repeat(" ", width[i]-utf8.RuneCountInString(c))
			if t.align[i] == alignRight {
				l.WriteString(pad + c)
			} else {
				l.WriteString(c + pad)
			}
			if i < len(row)-1 {
				l.WriteString("  ")
			}
		}
		// The last column is not padded, and an empty cell leaves no separator behind.
		b.WriteString(strings.TrimRight(l.String(), " ") + "\n")
	}
	line(t.header)
	for _, row := range t.rows {
		line(row)
	}
	_, err := io.WriteString(w, b.String())
	if err != nil {
		return fmt.Errorf("sagactl: write table: %w", err)
	}
	return nil
}

// truncate shortens s to at most n runes, ending with "…" when cut.
func truncate(s string, n int) string {
	if n <= 0 || utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}
