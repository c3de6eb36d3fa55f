package tracker

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// derivedFormat names the format of what Rebuild derives from the index (the saga
// summaries, the flow rows and their tallies). Change it when that format changes, so
// that Run rebuilds an index derived by an earlier one.
const derivedFormat = "summaries 1, flow 1"

// rebuiltKey is the key of the meta table's row that says what the derived tables were
// last rebuilt for.
const rebuiltKey = "rebuilt_for"

// metaTable names the table of the tracker's own records about the index.
func (t *Tracker) metaTable() string { return t.table + "_meta" }

// Fingerprint identifies the saga declarations and the format of what the tracker
// derives from the index (summaries, flow rows and tallies). Rebuild records it in the
// table "<table>_meta" under the key "rebuilt_for"; Run rebuilds when the recorded one
// differs. A tool that fills an index as the tracker would have records it there too.
func (t *Tracker) Fingerprint() (string, error) {
	decl, err := json.Marshal(t.cfg.Sagas)
	if err != nil {
		return "", fmt.Errorf("tracker: fingerprint: %w", err)
	}
	sum := sha256.Sum256(append([]byte(derivedFormat+"\x00"), decl...))
	return hex.EncodeToString(sum[:]), nil
}

// RebuildNeeded reports whether the derived tables were last rebuilt for other
// declarations or another format than the tracker's, or never (an index filled by a
// version that did not record it, or a rebuild that did not finish).
func (t *Tracker) RebuildNeeded(ctx context.Context) (bool, error) {
	want, err := t.Fingerprint()
	if err != nil {
		return false, err
	}
	var got string
	err = t.queryRow(ctx, `SELECT value FROM `+t.metaTable()+` WHERE key = $1`, []any{rebuiltKey}, &got)
	if errors.Is(err, pgx.ErrNoRows) {
		return true, nil
	}
	if err != nil {
		return false, fmt.Errorf("tracker: rebuild needed: %w", err)
	}
	return got != want, nil
}

// markRebuilt records what the derived tables are rebuilt for: "" while a rebuild runs,
// the fingerprint once it is done.
func (t *Tracker) markRebuilt(ctx context.Context, fingerprint string) error {
	_, err := t.db.Exec(ctx, `INSERT INTO `+t.metaTable()+` (key, value) VALUES ($1, $2)
		ON CONFLICT (key) DO UPDATE SET value = excluded.value`, rebuiltKey, fingerprint)
	if err != nil {
		return fmt.Errorf("tracker: record the rebuild: %w", err)
	}
	return nil
}

// queryRow scans the one row of q into dest; pgx.ErrNoRows when there is none.
func (t *Tracker) queryRow(ctx context.Context, q string, args []any, dest ...any) error {
	rows, err := t.db.Query(ctx, q, args...)
	if err != nil {
		return err
	}
	_, err = pgx.CollectExactlyOneRow(rows, func(r pgx.CollectableRow) (struct{}, error) {
		return struct{}{}, r.Scan(dest...)
	})
	return err
}
