package main

import (
	"cmp"
	"fmt"
	"math"
	"regexp"
	"slices"
	"strconv"
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
	// most frequent first; samplesPerShape the recorded instances of each whose
	// parameters the script draws from.
	maxShapes       = 200
	samplesPerShape = 64
	// freshMark stands for the random tail of a fresh UUID in a recorded literal.
	freshMark = "~R~"
)

var (
	placeholderRE = regexp.MustCompile(`\$([0-9]+)`)
	uuidRE        = regexp.MustCompile(`[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}`)
	// limitRE is a query's closing LIMIT $n.
	limitRE = regexp.MustCompile(`(?i)\bLIMIT \$([0-9]+)\s*;?\s*$`)
	// byIDsDeleteRE is a DELETE of the rows whose ids a relay has just read and published.
	byIDsDeleteRE = regexp.MustCompile(`^DELETE FROM ([a-z_]+) WHERE id = ANY\(\$1\)$`)
)

// replayInfo is what the replay knows of each recorded query: its parameter types (from
// PREPARE, by query text; none leaves the literals untyped) and the rows it returned per
// call over the recording (pg_stat_statements, by query text with whitespace collapsed).
type replayInfo struct {
	Types       map[string][]string
	RowsPerCall map[string]float64
}

// recordedShape is the recorded transactions of one statement sequence: how many, and up
// to samplesPerShape of them spread over the recording, each with its fresh UUIDs.
type recordedShape struct {
	key     string
	count   int
	samples []recordedTx
	fresh   []map[string]bool
}

// buildReplayScript turns a service's recorded transactions (log order) into a pgbench
// script that runs one of them per pgbench transaction, each shape as often as it was
// recorded. Every statement of a shape is one prepared statement whose parameters are
// picked from the recorded instances by the transaction's :sample, as the services
// prepare a statement once and bind new values.
//
// Keys created by a transaction must be new in every replay, or the replay would take the
// cheaper ON CONFLICT path or fail on a unique key: a UUID the log shows first in a
// transaction gets a random 48-bit tail (:r, drawn per transaction) in every replay. A
// UUID seen earlier addresses a row that exists (an order updated by a later event) and
// stays as recorded.
//
// A query ending in LIMIT $n reads as many rows as it returned on average in the
// recording (rounded), not its recorded limit: a relay's read returns the few rows
// committed since its last round, while the replay's outbox rows are never published and
// would come back in full batches. For the same reason a relay's DELETE of the rows it
// published deletes as many of the oldest rows.
func buildReplayScript(txs []recordedTx, orders int, info replayInfo) replayScript {
	shapes := map[string]*recordedShape{}
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
			s = &recordedShape{key: key}
			shapes[key] = s
		}
		s.count++
		// Keep instances spread over the recording: every instance until the sample
		// is full, then every samplesPerShape-th one replaces the oldest.
		if len(s.samples) < samplesPerShape {
			s.samples, s.fresh = append(s.samples, tx), append(s.fresh, fresh)
		} else if s.count%samplesPerShape == 0 {
			s.samples, s.fresh = append(s.samples[1:], tx), append(s.fresh[1:], fresh)
		}
	}
	list := make([]*recordedShape, 0, len(shapes))
	total := 0
	for _, s := range shapes {
		list = append(list, s)
		total += s.count
	}
	if total == 0 {
		return replayScript{}
	}
	slices.SortFunc(list, func(a, b *recordedShape) int {
		return cmp.Or(cmp.Compare(b.count, a.count), strings.Compare(a.key, b.key))
	})
	kept := list[:min(len(list), maxShapes)]
	replayed := 0
	for _, s := range kept {
		replayed += s.count
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\\set r random(0, 281474976710655)\n\\set pick random(1, %d)\n", replayed)
	cum := 0
	for i, s := range kept {
		cum += s.count
		kw := "\\elif"
		if i == 0 {
			kw = "\\if"
		}
		fmt.Fprintf(&b, "%s :pick <= %d\n%s", kw, cum, s.sql(info))
	}
	b.WriteString("\\endif\n")
	return replayScript{Script: b.String(), TxPerOrder: float64(total) / float64(max(orders, 1)),
		Shapes: len(list), Replayed: float64(replayed) / float64(total)}
}

// sql is the shape's script lines: the sample drawn, then one statement a line. A
// transaction of several statements that did not start with BEGIN ran as one implicit
// transaction (a pipeline without a Sync between), so it is wrapped in BEGIN … COMMIT.
func (s *recordedShape) sql(info replayInfo) string {
	var b strings.Builder
	if len(s.samples) > 1 {
		fmt.Fprintf(&b, "\\set sample random(1, %d)\n", len(s.samples))
	}
	stmts := s.samples[0].Stmts
	wrap := len(stmts) > 1 && !strings.EqualFold(strings.TrimSpace(stmts[0].Query), "begin")
	if wrap {
		b.WriteString("BEGIN;\n")
	}
	for i := range stmts {
		b.WriteString(s.statement(i, info))
		b.WriteString(";\n")
	}
	if wrap {
		b.WriteString("COMMIT;\n")
	}
	return b.String()
}

// statement is the shape's i-th statement on one line, each $n replaced by the recorded
// values as one expression.
func (s *recordedShape) statement(i int, info replayInfo) string {
	st := s.samples[0].Stmts[i]
	query := strings.TrimSpace(st.Query)
	key := strings.Join(strings.Fields(query), " ")
	if m := byIDsDeleteRE.FindStringSubmatch(key); m != nil && len(st.Params) == 1 {
		ids := 0
		for _, tx := range s.samples {
			ids += strings.Count(tx.Stmts[i].Params[0], ",") + 1
		}
		n := int(math.Round(float64(ids) / float64(len(s.samples))))
		return fmt.Sprintf("DELETE FROM %s WHERE id IN (SELECT id FROM %s ORDER BY id LIMIT %d FOR UPDATE SKIP LOCKED)", m[1], m[1], n)
	}
	limitParam := 0
	if m := limitRE.FindStringSubmatch(key); m != nil {
		if _, ok := info.RowsPerCall[key]; ok {
			limitParam, _ = strconv.Atoi(m[1])
		}
	}
	types := info.Types[st.Query]
	q := placeholderRE.ReplaceAllStringFunc(stripComments(query), func(m string) string {
		n, err := strconv.Atoi(m[1:])
		if err != nil || n < 1 || n > len(st.Params) {
			return m
		}
		var expr string
		if n == limitParam {
			expr = strconv.Itoa(int(math.Round(info.RowsPerCall[key])))
		} else {
			expr = s.values(i, n-1)
		}
		if n <= len(types) && types[n-1] != "" && expr != "NULL" {
			return "(" + expr + ")::" + types[n-1]
		}
		return expr
	})
	// pgbench reads one SQL command up to the semicolon ending it; keep it on one line
	// and strip a trailing semicolon of the query itself.
	return strings.TrimSuffix(strings.Join(strings.Fields(q), " "), ";")
}

// values is one expression for parameter p of statement i: its recorded literal if every
// sample has the same, else the sample's among all of them; fresh UUIDs get :r's tail.
func (s *recordedShape) values(i, p int) string {
	lits := make([]string, len(s.samples))
	same, marked := true, false
	for j, tx := range s.samples {
		lits[j] = markFresh(tx.Stmts[i].Params[p], s.fresh[j])
		same = same && lits[j] == lits[0]
		marked = marked || strings.Contains(lits[j], freshMark)
	}
	expr := lits[0]
	if !same {
		expr = "(ARRAY[" + strings.Join(lits, ", ") + "])[:sample]"
	}
	if marked {
		expr = "replace(" + expr + ", '" + freshMark + "', lpad(to_hex(:r::bigint), 12, '0'))"
	}
	return expr
}

// markFresh returns a recorded literal (quoted or NULL) as pgbench script text: the tail
// of each fresh UUID in it replaced by freshMark, and no variable for pgbench to read in
// it (see pgbenchText).
func markFresh(lit string, fresh map[string]bool) string {
	if len(lit) < 2 || lit[0] != '\'' {
		return lit
	}
	text := uuidRE.ReplaceAllStringFunc(lit[1:len(lit)-1], func(u string) string {
		if fresh[u] {
			return u[:24] + freshMark
		}
		return u
	})
	return pgbenchText(text)
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
