package main

import (
	"cmp"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"unicode"
)

// recordedStmt is one statement a service sent, as the server logged it: the query with
// $n placeholders and the bound parameters as SQL literals ('…' or NULL), in order.
type recordedStmt struct {
	Query  string
	Params []string
}

// recordedTx is one transaction of one service's database, in log order.
type recordedTx struct {
	Stmts []recordedStmt
}

// replayScript is one service's recorded transactions as a pgbench script.
type replayScript struct {
	Script string
	// TxPerOrder is the recorded transactions per order created; Shapes the distinct
	// statement sequences among them, Replayed the share of the transactions whose
	// shape the script replays (the rarest shapes past maxShapes are left out).
	TxPerOrder float64
	Shapes     int
	Replayed   float64
}

const (
	// maxShapes bounds the distinct transactions (statement sequences) of a script,
	// most frequent first; samplesPerShape the recorded instances of each, whose
	// parameters the script draws from in proportion.
	maxShapes       = 40
	samplesPerShape = 8
)

var (
	placeholderRE = regexp.MustCompile(`\$([0-9]+)`)
	uuidRE        = regexp.MustCompile(`[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}`)
)

// buildReplayScript turns a service's recorded transactions (log order) into a pgbench
// script that runs one of them per pgbench transaction, each shape as often as it was
// recorded, with a recorded instance's parameters. types gives each query's parameter
// types (from PREPARE; a missing entry leaves the literal untyped).
//
// Keys created by a transaction must be new in every replay, or the replay would take the
// cheaper ON CONFLICT path or fail on a unique key: a UUID the log shows first in a
// transaction is replaced in every replay by one made of its first 24 characters and a
// random 48-bit tail (:r, drawn per transaction). A UUID seen earlier addresses a row that
// exists (an order updated by a later event) and stays as recorded.
func buildReplayScript(txs []recordedTx, orders int, types map[string][]string) replayScript {
	type shape struct {
		key     string
		count   int
		samples []string // SQL of recorded instances
	}
	shapes := map[string]*shape{}
	seen := map[string]bool{}
	for _, tx := range txs {
		if len(tx.Stmts) == 0 {
			continue
		}
		fresh := map[string]bool{}
		var keys []string
		for _, st := range tx.Stmts {
			keys = append(keys, st.Query)
			for _, p := range st.Params {
				for _, u := range uuidRE.FindAllString(p, -1) {
					if !seen[u] {
						fresh[u] = true
					}
				}
			}
		}
		for u := range fresh {
			seen[u] = true
		}
		key := strings.Join(keys, "\x00")
		s := shapes[key]
		if s == nil {
			s = &shape{key: key}
			shapes[key] = s
		}
		s.count++
		// Keep instances spread over the recording: every instance until the sample
		// is full, then every count-th one replaces the oldest.
		sql := txSQL(tx, fresh, types)
		if len(s.samples) < samplesPerShape {
			s.samples = append(s.samples, sql)
		} else if s.count%samplesPerShape == 0 {
			s.samples = append(s.samples[1:], sql)
		}
	}
	list := make([]*shape, 0, len(shapes))
	total := 0
	for _, s := range shapes {
		list = append(list, s)
		total += s.count
	}
	if total == 0 {
		return replayScript{}
	}
	slices.SortFunc(list, func(a, b *shape) int {
		return cmp.Or(cmp.Compare(b.count, a.count), strings.Compare(a.key, b.key))
	})
	kept := list[:min(len(list), maxShapes)]
	keptCount := 0
	for _, s := range kept {
		keptCount += s.count * len(s.samples) // weight units: count per sample × samples
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\\set r random(0, 281474976710655)\n\\set pick random(1, %d)\n", keptCount)
	cum, replayed, first := 0, 0, true
	for _, s := range kept {
		replayed += s.count
		for _, sql := range s.samples {
			cum += s.count
			kw := "\\elif"
			if first {
				kw, first = "\\if", false
			}
			fmt.Fprintf(&b, "%s :pick <= %d\n%s", kw, cum, sql)
		}
	}
	b.WriteString("\\endif\n")
	return replayScript{Script: b.String(), TxPerOrder: float64(total) / float64(max(orders, 1)),
		Shapes: len(list), Replayed: float64(replayed) / float64(total)}
}

// txSQL is one recorded transaction as script lines, one statement a line, with its
// parameters inlined and its fresh UUIDs made new per replay. A transaction of several
// statements that did not start with BEGIN ran as one implicit transaction (a pipeline
// without a Sync between), so it is wrapped in BEGIN … COMMIT.
func txSQL(tx recordedTx, fresh map[string]bool, types map[string][]string) string {
	var b strings.Builder
	explicit := strings.EqualFold(strings.TrimSpace(tx.Stmts[0].Query), "begin")
	wrap := len(tx.Stmts) > 1 && !explicit
	if wrap {
		b.WriteString("BEGIN;\n")
	}
	for _, st := range tx.Stmts {
		if del, ok := oldestRowsDelete(st); ok {
			b.WriteString(del)
		} else {
			b.WriteString(inlineParams(st, fresh, types[st.Query]))
		}
		b.WriteString(";\n")
	}
	if wrap {
		b.WriteString("COMMIT;\n")
	}
	return b.String()
}

// byIDsDeleteRE is a DELETE of the rows whose ids a relay has just read and published.
var byIDsDeleteRE = regexp.MustCompile(`^DELETE FROM ([a-z_]+) WHERE id = ANY\(\$1\)$`)

// oldestRowsDelete rewrites a relay's DELETE of the rows it published (ids of rows the
// replay never made) as a DELETE of as many of the table's oldest rows: without it the
// replay's outbox rows would pile up and every relay read would return a full batch.
func oldestRowsDelete(st recordedStmt) (string, bool) {
	m := byIDsDeleteRE.FindStringSubmatch(strings.TrimSpace(st.Query))
	if m == nil || len(st.Params) != 1 || !strings.HasPrefix(st.Params[0], "'{") {
		return "", false
	}
	n := strings.Count(st.Params[0], ",") + 1
	return fmt.Sprintf("DELETE FROM %s WHERE id IN (SELECT id FROM %s ORDER BY id LIMIT %d FOR UPDATE SKIP LOCKED)", m[1], m[1], n), true
}

// inlineParams replaces st's $n by its literal, cast to types[n-1] when known, on one line.
func inlineParams(st recordedStmt, fresh map[string]bool, types []string) string {
	q := placeholderRE.ReplaceAllStringFunc(stripComments(st.Query), func(m string) string {
		var n int
		if _, err := fmt.Sscanf(m[1:], "%d", &n); err != nil || n < 1 || n > len(st.Params) {
			return m
		}
		lit := freshLiteral(st.Params[n-1], fresh)
		if n <= len(types) && types[n-1] != "" && lit != "NULL" {
			return "(" + lit + ")::" + types[n-1]
		}
		return lit
	})
	// pgbench reads one SQL command up to the semicolon ending it; keep it on one line
	// and strip a trailing semicolon of the query itself.
	return strings.TrimSuffix(strings.Join(strings.Fields(q), " "), ";")
}

// stripComments removes the -- comments of a query (outside its quoted literals), which
// would swallow the rest of the statement once it is put on one line.
func stripComments(q string) string {
	var b strings.Builder
	quoted := false
	for i := 0; i < len(q); i++ {
		switch {
		case q[i] == '\'':
			quoted = !quoted
		case !quoted && strings.HasPrefix(q[i:], "--"):
			j := strings.IndexByte(q[i:], '\n')
			if j < 0 {
				return b.String()
			}
			i += j
		}
		b.WriteByte(q[i])
	}
	return b.String()
}

// freshLiteral rewrites a quoted literal so that each fresh UUID in it becomes an
// expression of the transaction's :r, keeping the rest of the text, and so that pgbench
// reads no variable in it (see pgbenchText).
func freshLiteral(lit string, fresh map[string]bool) string {
	if len(lit) < 2 || lit[0] != '\'' {
		return lit
	}
	text := lit[1 : len(lit)-1]
	var parts []string
	last := 0
	for _, l := range uuidRE.FindAllStringIndex(text, -1) {
		u := text[l[0]:l[1]]
		if !fresh[u] {
			continue
		}
		if l[0] > last {
			parts = append(parts, pgbenchText(text[last:l[0]]))
		}
		parts = append(parts, fmt.Sprintf("'%s' || lpad(to_hex(:r::bigint), 12, '0')", u[:24]))
		last = l[1]
	}
	if last < len(text) || len(parts) == 0 {
		parts = append(parts, pgbenchText(text[last:]))
	}
	if len(parts) == 1 && !strings.Contains(parts[0], "||") {
		return parts[0]
	}
	return "(" + strings.Join(parts, " || ") + ")"
}

// pgbenchText quotes text (already escaped for SQL) as a literal pgbench does not read
// a variable in: pgbench takes any ":name" of a command for a variable, inside quotes too,
// so a colon followed by a letter ends a literal and the rest is concatenated to it.
func pgbenchText(text string) string {
	var b strings.Builder
	b.WriteByte('\'')
	for i := 0; i < len(text); i++ {
		b.WriteByte(text[i])
		if text[i] == ':' && i+1 < len(text) && (text[i+1] == '_' || text[i+1] >= 0x80 ||
			unicode.IsLetter(rune(text[i+1]))) {
			b.WriteString("' || '")
		}
	}
	b.WriteByte('\'')
	return b.String()
}

// parseLogParams parses the DETAIL of a logged execute ("parameters: $1 = 'a', $2 =
// NULL") into the literals in order of their numbers.
func parseLogParams(detail string) ([]string, error) {
	s, ok := strings.CutPrefix(detail, "parameters: ")
	if !ok {
		return nil, nil
	}
	var out []string
	for len(s) > 0 {
		var n int
		if _, err := fmt.Sscanf(s, "$%d = ", &n); err != nil || n != len(out)+1 {
			return nil, fmt.Errorf("parameter %d: unexpected %.40q", len(out)+1, s)
		}
		s = s[strings.Index(s, " = ")+3:]
		var lit string
		if rest, ok := strings.CutPrefix(s, "NULL"); ok {
			lit, s = "NULL", rest
		} else if strings.HasPrefix(s, "'") {
			i := 1
			for {
				j := strings.IndexByte(s[i:], '\'')
				if j < 0 {
					return nil, fmt.Errorf("parameter %d: unterminated literal", n)
				}
				i += j + 1
				if i < len(s) && s[i] == '\'' { // '' inside the literal
					i++
					continue
				}
				break
			}
			lit, s = s[:i], s[i:]
		} else {
			return nil, fmt.Errorf("parameter %d: unexpected %.40q", n, s)
		}
		out = append(out, lit)
		s = strings.TrimPrefix(s, ", ")
	}
	return out, nil
}
