package main

import (
	"slices"
	"strings"
	"testing"
)

func TestParseLogParams(t *testing.T) {
	got, err := parseLogParams(`parameters: $1 = 'a, $2 = ''b''', $2 = NULL, $3 = '\x7b22'`)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{`'a, $2 = ''b'''`, "NULL", `'\x7b22'`}
	if !slices.Equal(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}
	if got, err := parseLogParams(""); err != nil || got != nil {
		t.Errorf("no parameters: got %q, %v", got, err)
	}
	if _, err := parseLogParams(`parameters: $1 = 'open`); err == nil {
		t.Error("an unterminated literal parses")
	}
}

func TestLoggedQuery(t *testing.T) {
	for msg, want := range map[string]string{
		"statement: begin":                 "begin",
		"execute stmtcache_1a: SELECT $1":  "SELECT $1",
		"execute <unnamed>: DELETE FROM t": "DELETE FROM t",
		"duration: 0.1 ms":                 "",
	} {
		if got, _ := loggedQuery(msg); got != want {
			t.Errorf("loggedQuery(%q) = %q, want %q", msg, got, want)
		}
	}
}

// TestBuildReplayScript: each recorded shape becomes a weighted branch whose statements
// pick their parameters from the recorded instances; a UUID first seen in a transaction
// is made new per replay, one seen before stays; parameters are cast to the prepared
// types; a pipeline of several statements is wrapped in a transaction; a relay's read
// returns as many rows as recorded and its DELETE deletes as many of the oldest rows.
func TestBuildReplayScript(t *testing.T) {
	const id = "0b6c1f4e-9a2d-4c1b-8e7f-1234567890ab"
	insert := "INSERT INTO orders (id, note) VALUES ($1, $2)"
	update := "UPDATE orders SET state = $2 WHERE id = $1"
	read := "SELECT id FROM outbox ORDER BY id LIMIT $1"
	del := "DELETE FROM outbox WHERE id = ANY($1)"
	txs := []recordedTx{
		{Stmts: []recordedStmt{{Query: insert, Params: []string{"'" + id + "'", "'key:" + id + "'"}},
			{Query: "INSERT INTO outbox (payload) VALUES ($1)", Params: []string{`'\x00'`}}}},
		{Stmts: []recordedStmt{{Query: "begin"}, {Query: update, Params: []string{"'" + id + "'", "'PAID'"}}, {Query: "commit"}}},
		{Stmts: []recordedStmt{{Query: "begin"}, {Query: update, Params: []string{"'" + id + "'", "NULL"}}, {Query: "commit"}}},
		{Stmts: []recordedStmt{{Query: read, Params: []string{"'1000'"}}}},
		{Stmts: []recordedStmt{{Query: del, Params: []string{"'{7,8}'"}}}},
	}
	info := replayInfo{Types: map[string][]string{insert: {"uuid", "text"}, update: {"uuid", "text"}, read: {"bigint"}},
		RowsPerCall: map[string]float64{read: 1.6}}
	s := buildReplayScript(txs, 2, info)
	if s.TxPerOrder != 2.5 || s.Shapes != 4 || s.Replayed != 1 {
		t.Errorf("tx/order %v, shapes %d, replayed %v; want 2.5, 4, 1", s.TxPerOrder, s.Shapes, s.Replayed)
	}
	fresh := "replace('0b6c1f4e-9a2d-4c1b-8e7f-~R~', '~R~', lpad(to_hex(:r::bigint), 12, '0'))"
	for _, want := range []string{
		"\\set r random(0, 281474976710655)\n\\set pick random(1, 5)\n",
		// The update shape (2 transactions) comes first, then the others by their text.
		"\\if :pick <= 2\n\\set sample random(1, 2)\nbegin;\nUPDATE orders SET state = ((ARRAY['PAID', NULL])[:sample])::text WHERE id = ('" + id + "')::uuid;\ncommit;\n",
		"\\elif :pick <= 3\nDELETE FROM outbox WHERE id IN (SELECT id FROM outbox ORDER BY id LIMIT 2 FOR UPDATE SKIP LOCKED);\n",
		"\\elif :pick <= 4\nBEGIN;\nINSERT INTO orders (id, note) VALUES ((" + fresh + ")::uuid, (replace('key:0b6c1f4e-9a2d-4c1b-8e7f-~R~', '~R~', lpad(to_hex(:r::bigint), 12, '0')))::text);\nINSERT INTO outbox (payload) VALUES ('\\x00');\nCOMMIT;\n",
		"\\elif :pick <= 5\nSELECT id FROM outbox ORDER BY id LIMIT (2)::bigint;\n\\endif\n",
	} {
		if !strings.Contains(s.Script, want) {
			t.Errorf("script lacks %q:\n%s", want, s.Script)
		}
	}
	if got := buildReplayScript(nil, 1, replayInfo{}); got.Script != "" {
		t.Errorf("no transactions: script %q", got.Script)
	}
}

func TestStripComments(t *testing.T) {
	got := stripComments("SELECT '--x', 1 -- one\n  , 2 -- two")
	if want := "SELECT '--x', 1 \n  , 2 "; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

func TestMarkFresh(t *testing.T) {
	const a, b = "0b6c1f4e-9a2d-4c1b-8e7f-1234567890ab", "1b6c1f4e-9a2d-4c1b-8e7f-1234567890ab"
	if got, want := markFresh("'x"+a+"y"+b+"'", map[string]bool{a: true}), "'x0b6c1f4e-9a2d-4c1b-8e7f-~R~y"+b+"'"; got != want {
		t.Errorf("got %s, want %s", got, want)
	}
	// pgbench would read :lock and :order as variables.
	if got, want := markFresh("'choreo:lock:order:{x}'", nil), "'choreo:' || 'lock:' || 'order:{x}'"; got != want {
		t.Errorf("got %s, want %s", got, want)
	}
	if got := markFresh("NULL", nil); got != "NULL" {
		t.Errorf("NULL became %s", got)
	}
}
