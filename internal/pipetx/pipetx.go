// Package pipetx runs a Postgres transaction that spends no round trip of its own on
// BEGIN or COMMIT: the BEGIN goes out with the transaction's first statement (pgx's
// Batch.BeginTx) and the COMMIT with its last ones (CommitWith), in one pipeline each.
//
// A consumer transaction is short (claim, a handler's statements, the outbox rows,
// commit); two round trips of five are BEGIN and COMMIT on their own. Saving them saves
// the wake-ups and system calls of both ends and, when the last statements write hot
// rows, shortens the time their row locks are held: the COMMIT is already on its way
// when the UPDATE runs.
//
// Only a transaction that owns its connection can be begun and committed this way: Begin
// on a *pgxpool.Pool acquires a connection for the transaction (when the first statement
// is sent) and releases it when the transaction ends; on a *pgx.Conn it uses the
// connection. On any other Beginner (a pgx.Tx: a savepoint) it begins and commits as
// pgx.BeginFunc does.
package pipetx

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Beginner starts a transaction; *pgxpool.Pool, *pgx.Conn and pgx.Tx satisfy it.
type Beginner interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

// Tx is a transaction whose BEGIN has not been sent yet: the first statement sends it.
// It implements pgx.Tx; Exec, QueryRow and SendBatch carry the BEGIN in their own round
// trip, the other methods send it first. End it with CommitWith (or Commit) or Rollback;
// after either, every method fails with pgx.ErrTxClosed. A Tx is not safe for concurrent
// use, as no pgx.Tx is.
type Tx struct {
	pool *pgxpool.Pool // set: the transaction acquires a connection from it
	conn *pgx.Conn     // set: the transaction runs on it (acquired from pool, or given)
	pc   *pgxpool.Conn // the connection acquired from pool, released when the tx ends
	db   Beginner      // set when neither pool nor conn: begun with db.Begin
	tx   pgx.Tx        // the transaction once begun (possibly closed, if begin failed)
	done bool
}

var _ pgx.Tx = (*Tx)(nil)

// Begin returns a transaction on db that is not begun yet; it sends nothing.
func Begin(db Beginner) *Tx {
	switch db := db.(type) {
	case *pgxpool.Pool:
		return &Tx{pool: db}
	case *pgx.Conn:
		return &Tx{conn: db}
	default:
		return &Tx{db: db}
	}
}

// pipelined reports whether the transaction begins and commits without round trips of
// its own.
func (t *Tx) pipelined() bool { return t.db == nil }

// first sends b as the transaction's first statements, after the BEGIN, and returns b's
// results: the BEGIN's own has been read. Afterwards t.tx is set, closed if BEGIN failed.
func (t *Tx) first(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	if !t.pipelined() {
		tx, err := t.db.Begin(ctx)
		if err != nil {
			return t.failed(b, err)
		}
		t.tx = tx
		return tx.SendBatch(ctx, b)
	}
	if t.conn == nil {
		pc, err := t.pool.Acquire(ctx)
		if err != nil {
			return t.failed(b, err)
		}
		t.pc, t.conn = pc, pc.Conn()
	}
	nb := &pgx.Batch{QueuedQueries: make([]*pgx.QueuedQuery, 0, len(b.QueuedQueries)+1)}
	nb.BeginTx(pgx.TxOptions{})
	nb.QueuedQueries = append(nb.QueuedQueries, b.QueuedQueries...)
	br := t.conn.SendBatch(ctx, nb)
	t.tx = br.Tx()
	if _, err := br.Exec(); err != nil { // BEGIN's result
		_ = br.Close() // resynchronises the connection; closes t.tx
		return pgx.FailedBatchResults(b, err)
	}
	return br
}

// failed records that the transaction could not begin: t.tx becomes a closed
// transaction, and b's results all report err.
func (t *Tx) failed(b *pgx.Batch, err error) pgx.BatchResults {
	t.tx = closedTx()
	return pgx.FailedBatchResults(b, err)
}

// closedTx is a pgx.Tx on which every method fails (pgx.ErrTxClosed).
func closedTx() pgx.Tx {
	b := &pgx.Batch{}
	b.BeginTx(pgx.TxOptions{})
	return pgx.FailedBatchResults(b, pgx.ErrTxClosed).Tx()
}

// failedRows are pgx's rows of a statement that could not be sent: err on every method,
// safe to read and close.
func failedRows(err error) pgx.Rows {
	rows, _ := pgx.FailedBatchResults(&pgx.Batch{}, err).Query()
	return rows
}

// begin sends the BEGIN on its own, if it has not been sent.
func (t *Tx) begin(ctx context.Context) error {
	if t.tx != nil {
		return nil
	}
	return t.first(ctx, &pgx.Batch{}).Close()
}

// SendBatch sends b in the transaction; the first statements carry the BEGIN.
func (t *Tx) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	switch {
	case t.done:
		return pgx.FailedBatchResults(b, pgx.ErrTxClosed)
	case t.tx == nil:
		return t.first(ctx, b)
	}
	return t.tx.SendBatch(ctx, b)
}

// Exec runs sql in the transaction; as the first statement it carries the BEGIN.
func (t *Tx) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	switch {
	case t.done:
		return pgconn.CommandTag{}, pgx.ErrTxClosed
	case t.tx == nil:
		b := &pgx.Batch{}
		b.Queue(sql, args...)
		br := t.first(ctx, b)
		tag, err := br.Exec()
		return tag, closeBatch(br, err)
	}
	return t.tx.Exec(ctx, sql, args...)
}

// QueryRow runs sql in the transaction; as the first statement it carries the BEGIN,
// sent when the row is scanned.
func (t *Tx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	switch {
	case t.done:
		return pgx.FailedBatchResults(&pgx.Batch{}, pgx.ErrTxClosed).QueryRow()
	case t.tx == nil:
		return &firstRow{t: t, ctx: ctx, sql: sql, args: args}
	}
	return t.tx.QueryRow(ctx, sql, args...)
}

// firstRow is the row of the transaction's first statement, sent with the BEGIN by Scan.
type firstRow struct {
	t    *Tx
	ctx  context.Context
	sql  string
	args []any
}

func (r *firstRow) Scan(dest ...any) error {
	if r.t.tx != nil { // another statement began the transaction meanwhile
		return r.t.QueryRow(r.ctx, r.sql, r.args...).Scan(dest...)
	}
	b := &pgx.Batch{}
	b.Queue(r.sql, r.args...)
	br := r.t.first(r.ctx, b)
	return closeBatch(br, br.QueryRow().Scan(dest...))
}

// closeBatch closes br and returns err, the statement's error, or else Close's: when
// the statement failed, Close reports the same failure.
func closeBatch(br pgx.BatchResults, err error) error {
	if cerr := br.Close(); err == nil {
		return cerr
	}
	return err
}

// Query runs sql in the transaction, after sending the BEGIN if it has not been sent.
func (t *Tx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	if err := t.open(ctx); err != nil {
		return failedRows(err), err
	}
	return t.tx.Query(ctx, sql, args...)
}

// CopyFrom copies rows into a table in the transaction, after sending the BEGIN if it
// has not been sent.
func (t *Tx) CopyFrom(ctx context.Context, table pgx.Identifier, cols []string, src pgx.CopyFromSource) (int64, error) {
	if err := t.open(ctx); err != nil {
		return 0, err
	}
	return t.tx.CopyFrom(ctx, table, cols, src)
}

// Prepare prepares a statement on the transaction's connection, after sending the BEGIN
// if it has not been sent.
func (t *Tx) Prepare(ctx context.Context, name, sql string) (*pgconn.StatementDescription, error) {
	if err := t.open(ctx); err != nil {
		return nil, err
	}
	return t.tx.Prepare(ctx, name, sql)
}

// Begin starts a pseudo nested transaction (a savepoint), after sending the BEGIN if it
// has not been sent.
func (t *Tx) Begin(ctx context.Context) (pgx.Tx, error) {
	if err := t.open(ctx); err != nil {
		return nil, err
	}
	return t.tx.Begin(ctx)
}

// LargeObjects returns the transaction's large objects. The BEGIN is sent first if it
// has not been (with no deadline: LargeObjects takes no context); if that fails, every
// method of the result fails with pgx.ErrTxClosed.
func (t *Tx) LargeObjects() pgx.LargeObjects {
	if t.done {
		return closedTx().LargeObjects()
	}
	_ = t.begin(context.Background())
	return t.tx.LargeObjects()
}

// Conn returns the transaction's connection: nil before the first statement when the
// transaction acquires its connection from a pool.
func (t *Tx) Conn() *pgx.Conn {
	if t.tx != nil {
		return t.tx.Conn()
	}
	return t.conn
}

// open fails if the transaction has ended, and sends the BEGIN if it has not been sent.
func (t *Tx) open(ctx context.Context) error {
	if t.done {
		return pgx.ErrTxClosed
	}
	return t.begin(ctx)
}

// Commit commits the transaction: CommitWith(ctx, nil).
func (t *Tx) Commit(ctx context.Context) error { return t.CommitWith(ctx, nil) }

// CommitWith sends last (nil or empty: none) and the COMMIT in one round trip, and ends
// the transaction. If a statement of last fails, the COMMIT does not run: nothing is
// committed and the statement's error (through its callback, if it has one) is
// returned. last's callbacks run as the results are read, after the server ran the
// COMMIT: a callback that fails on a statement that succeeded cannot undo the commit
// (CommitWith still returns its error), so they must fail only when their statement
// did; a check that must be able to roll back is sent before (txhook.Checker). A
// transaction that sent nothing yet sends BEGIN, last and COMMIT together (and nothing
// at all when last is empty). COMMIT of a transaction that had already failed rolls back
// and reports pgx.ErrTxCommitRollback. On a Beginner that is neither a pool nor a
// connection, last is sent in the transaction and then Commit is called, as pgx does.
func (t *Tx) CommitWith(ctx context.Context, last *pgx.Batch) error {
	if t.done {
		return pgx.ErrTxClosed
	}
	if last == nil {
		last = &pgx.Batch{}
	}
	if t.tx == nil && len(last.QueuedQueries) == 0 {
		t.end()
		return nil
	}
	if !t.pipelined() {
		err := t.SendBatch(ctx, last).Close()
		if err == nil {
			err = t.tx.Commit(ctx)
		}
		if err != nil {
			_ = t.tx.Rollback(ctx)
		}
		t.end()
		return err
	}
	b := &pgx.Batch{QueuedQueries: slices.Clip(last.QueuedQueries)} // last stays as it is
	b.Queue("commit").Exec(func(tag pgconn.CommandTag) error {
		if tag.String() == "ROLLBACK" {
			return pgx.ErrTxCommitRollback
		}
		return nil
	})
	err := t.SendBatch(ctx, b).Close()
	if err != nil && t.conn != nil && t.conn.PgConn().TxStatus() != 'I' {
		// A statement of last failed: the COMMIT did not run.
		if rerr := t.tx.Rollback(ctx); rerr != nil {
			err = errors.Join(err, fmt.Errorf("rollback: %w", rerr))
		}
	}
	t.end()
	return err
}

// Rollback rolls the transaction back and ends it; a transaction that sent nothing
// sends nothing.
func (t *Tx) Rollback(ctx context.Context) error {
	if t.done {
		return pgx.ErrTxClosed
	}
	var err error
	if t.tx != nil {
		if err = t.tx.Rollback(ctx); errors.Is(err, pgx.ErrTxClosed) {
			err = nil // BEGIN failed: there is nothing to roll back
		}
	}
	t.end()
	return err
}

// end marks the transaction ended and releases an acquired connection (the pool closes
// it if it is still inside a transaction).
func (t *Tx) end() {
	t.done = true
	if t.pc != nil {
		t.pc.Release()
		t.pc = nil
	}
}

// Run runs fn in a transaction on db and commits it with the statements fn returns
// (nil: none) in the COMMIT's round trip (CommitWith). If fn returns an error, or
// panics, the transaction is rolled back and the error returned (the panic goes on).
func Run(ctx context.Context, db Beginner, fn func(tx *Tx) (*pgx.Batch, error)) (err error) {
	tx := Begin(db)
	defer func() {
		if !tx.done {
			_ = tx.Rollback(ctx)
		}
	}()
	last, err := fn(tx)
	if err != nil {
		return err
	}
	return tx.CommitWith(ctx, last)
}
