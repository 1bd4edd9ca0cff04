package mysql

// The initial copy's target side (tablecopy.Target): the copy plan kept in
// two tables next to the checkpoint table, and chunks written as multi-row
// INSERTs in one transaction with the chunk's done record.
//
// # Round trips
//
// With multi-statement packets a chunk is START TRANSACTION, [the DELETE of
// its range,] the INSERTs, the done record and COMMIT in as few packets as
// the statement size allows: a chunk that fits one INSERT is one round trip.
// Without them each statement is a round trip of its own.
//
// # Session
//
// A copy session runs with foreign_key_checks = 0, as every session of
// the target does (a child table's chunk may be written before its
// parent's, and a re-copied chunk's range delete must fire no action).
// Each copy transaction of a stream whose generation this process took
// reads the fence row first (fence.go), into a variable so that the
// transaction's one result stays its done record's: a killed process's
// late chunk fails there and commits nothing.
// The range predicates and digests come from tablecopy/keyrange, which spells
// literals for the default sql_mode (backslash escapes on) so that a MySQL
// source and target build the same SQL; the target's session otherwise runs
// with NO_BACKSLASH_ESCAPES, so a statement whose range bound holds a byte
// that MyLiteral escapes runs with that mode switched off around it.

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/sluice-cdc/sluice"
	"github.com/sluice-cdc/sluice/tablecopy"
	"github.com/sluice-cdc/sluice/tablecopy/keyrange"
)

var _ tablecopy.Target = (*Target)(nil)

const (
	copyPlanTable  = "sluice_copy_plan"
	copyChunkTable = "sluice_copy_chunk"
)

// copyPlanDDL and copyChunkDDL create the plan tables: in Open's setup
// packet (where the stream's plan is also read) and in WritePlan.
const copyPlanDDL = "CREATE TABLE IF NOT EXISTS `" + copyPlanTable + "` (\n" +
	"\t`stream` VARCHAR(255) NOT NULL,\n" +
	"\t`epoch` INT NOT NULL,\n" +
	"\t`position` TEXT NOT NULL,\n" +
	"\t`started_at` DATETIME(6) NOT NULL,\n" +
	"\t`updated_at` DATETIME(6) NOT NULL,\n" +
	"\t`handed_off_at` DATETIME(6) NULL,\n" +
	"\t`handoff_position` TEXT NULL,\n" +
	"\tPRIMARY KEY (`stream`)\n" +
	") ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin"

const copyChunkDDL = "CREATE TABLE IF NOT EXISTS `" + copyChunkTable + "` (\n" +
	"\t`stream` VARCHAR(255) NOT NULL,\n" +
	"\t`table_name` VARCHAR(512) NOT NULL,\n" +
	"\t`n` INT NOT NULL,\n" +
	"\t`bound_from` TEXT NOT NULL,\n" +
	"\t`bound_to` TEXT NOT NULL,\n" +
	"\t`done` BOOL NOT NULL DEFAULT 0,\n" +
	"\t`rows` BIGINT NOT NULL DEFAULT 0,\n" +
	"\t`bytes` BIGINT NOT NULL DEFAULT 0,\n" +
	"\t`epoch` INT NOT NULL DEFAULT 0,\n" +
	"\t`copies` INT NOT NULL DEFAULT 0,\n" +
	"\t`at` DATETIME(6) NULL,\n" +
	"\tPRIMARY KEY (`stream`, `table_name`, `n`)\n" +
	") ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin"

// escapesMode is sqlMode with backslash escapes on, for the statements that
// carry keyrange's literals (see the comment at the top).
const escapesMode = "STRICT_ALL_TABLES,NO_ENGINE_SUBSTITUTION,NO_AUTO_VALUE_ON_ZERO"

// maxCopyStatement bounds a copy statement's bytes (and so the memory a
// chunk holds), whatever max_allowed_packet allows.
const maxCopyStatement = 4 << 20

// errNoTable is MySQL's ER_NO_SUCH_TABLE.
const errNoTable = 1146

func isNoTable(err error) bool {
	var me *mysql.MySQLError
	return errors.As(err, &me) && me.Number == errNoTable
}

// copyLimit is the byte limit of one copy statement: well under the packet
// limit, so that a packet holding one plus the transaction's small
// statements always fits.
func (t *Target) copyLimit() int {
	return max(min(maxCopyStatement, t.maxPacket/2), 1024)
}

// needsEscapes tells whether keyrange's literals for r mean something else
// under NO_BACKSLASH_ESCAPES: only when a bound holds a byte MyLiteral
// escapes.
func needsEscapes(r tablecopy.Range) bool {
	for _, k := range []sluice.Row{r.From, r.To} {
		for _, v := range k {
			if strings.ContainsAny(v.Text, "\x00'\\\n\r\x1a") {
				return true
			}
		}
	}
	return false
}

// copySession sends a copy transaction's statements: queued into packets of
// one full statement (at most limit bytes) and the small statements around
// it with multi-statements, one statement per round trip without.
type copySession struct {
	t       *Target
	multi   bool
	limit   int
	pending strings.Builder
	scan    func(*sql.Rows) error // the result of the one SELECT in pending
	sent    bool                  // something reached the server
}

func (t *Target) newCopySession() *copySession {
	return &copySession{t: t, multi: t.multi, limit: t.copyLimit()}
}

// exec runs q, or queues it behind the pending statements.
func (s *copySession) exec(ctx context.Context, q string) error {
	if !s.multi {
		s.sent = true
		_, err := s.t.conn.ExecContext(ctx, q)
		return err
	}
	// A packet holds at most one full statement (limit) and the small ones
	// around it: 1.5 limits stay under max_allowed_packet (limit is at
	// most half of it).
	if s.pending.Len() > 0 && s.pending.Len()+len(q)+2 > s.limit+s.limit/2 {
		if err := s.flush(ctx); err != nil {
			return err
		}
	}
	if s.pending.Len() > 0 {
		s.pending.WriteString(";\n")
	}
	s.pending.WriteString(q)
	return nil
}

// query runs the SELECT q and hands its result to scan (queued as exec
// does; the result is read when the packet is sent).
func (s *copySession) query(ctx context.Context, q string, scan func(*sql.Rows) error) error {
	if !s.multi {
		s.sent = true
		return queryAll(ctx, s.t.conn, q, scan)
	}
	if s.scan != nil {
		if err := s.flush(ctx); err != nil {
			return err
		}
	}
	if err := s.exec(ctx, q); err != nil {
		return err
	}
	s.scan = scan
	return nil
}

// flush sends the pending statements as one packet.
func (s *copySession) flush(ctx context.Context) error {
	if s.pending.Len() == 0 {
		return nil
	}
	q := s.pending.String()
	s.pending.Reset()
	scan := s.scan
	s.scan = nil
	s.sent = true
	if scan == nil {
		_, err := s.t.conn.ExecContext(ctx, q)
		return err
	}
	return queryAll(ctx, s.t.conn, q, scan)
}

// begin starts the copy transaction of stream: START TRANSACTION
// (implicit with autocommit = 0) and the fence check.
func (s *copySession) begin(ctx context.Context, stream string) error {
	if !s.t.implicitTx {
		if err := s.exec(ctx, "START TRANSACTION"); err != nil {
			return err
		}
	}
	return s.fence(ctx, stream)
}

// fence queues the fence check of stream (see fence.go), when the copy is
// fenced: its result goes into a variable, so that the transaction's one
// result read stays the done record's.
func (s *copySession) fence(ctx context.Context, stream string) error {
	if !s.t.copyFenced(stream) {
		return nil
	}
	return s.exec(ctx, fenceCheckInto(stream, s.t.gen, "@sluice_fence"))
}

// commit queues COMMIT and sends what is pending.
func (s *copySession) commit(ctx context.Context) error {
	if err := s.exec(ctx, "COMMIT"); err != nil {
		return err
	}
	return s.flush(ctx)
}

// abort rolls back after a failure and restores the session's settings,
// or drops the connection when that fails or it is lost.
func (s *copySession) abort(ctx context.Context, cause error) {
	s.pending.Reset()
	s.scan = nil
	if !s.sent {
		return
	}
	if connLost(cause) || ctx.Err() != nil {
		s.t.discard()
		return
	}
	restore := "SET SESSION sql_mode = '" + sqlMode + "'"
	var err error
	if s.multi {
		_, err = s.t.conn.ExecContext(ctx, "ROLLBACK;\n"+restore)
	} else if _, err = s.t.conn.ExecContext(ctx, "ROLLBACK"); err == nil {
		_, err = s.t.conn.ExecContext(ctx, restore)
	}
	if err != nil {
		s.t.log.Debug("roll back copy transaction", "err", err)
		s.t.discard()
	}
}

// ranged queues the statement q, which carries keyrange literals for r,
// with backslash escapes on around it when they matter.
func (s *copySession) ranged(ctx context.Context, r tablecopy.Range, q string, scan func(*sql.Rows) error) error {
	esc := needsEscapes(r)
	if esc {
		if err := s.exec(ctx, "SET SESSION sql_mode = '"+escapesMode+"'"); err != nil {
			return err
		}
	}
	var err error
	if scan != nil {
		err = s.query(ctx, q, scan)
	} else {
		err = s.exec(ctx, q)
	}
	if err != nil {
		return err
	}
	if esc {
		return s.exec(ctx, "SET SESSION sql_mode = '"+sqlMode+"'")
	}
	return nil
}

// queryAll runs q, which may hold several statements, and hands every
// result set that has columns to scan; an error of any statement is
// returned.
func queryAll(ctx context.Context, conn *sql.Conn, q string, scan func(*sql.Rows) error) error {
	rows, err := conn.QueryContext(ctx, q)
	if err != nil {
		return err
	}
	defer rows.Close()
	for {
		if cols, _ := rows.Columns(); len(cols) > 0 && scan != nil {
			if err := scan(rows); err != nil {
				return err
			}
		}
		for rows.Next() {
		}
		if !rows.NextResultSet() {
			break
		}
	}
	if err := rows.Err(); err != nil {
		return err
	}
	return rows.Close()
}

func lit(s string) string {
	var b strings.Builder
	quoteString(&b, s)
	return b.String()
}

// ReadPlan returns the stream's copy plan, or nil when the target has none
// (the plan tables not created included), in one query.
func (t *Target) ReadPlan(ctx context.Context, stream string) (*tablecopy.Plan, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if pre := t.pre; pre != nil && pre.havePlan && pre.stream == stream {
		pre.havePlan = false
		return pre.plan, nil
	}
	var p *tablecopy.Plan
	err := t.reading(ctx, func() error {
		rows, err := t.conn.QueryContext(ctx, planSQL(stream))
		if err != nil {
			return err
		}
		defer rows.Close()
		p, err = scanPlan(rows, stream)
		return err
	})
	if isNoTable(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read copy plan of stream %q from target %s.%s: %w", stream, t.database, copyChunkTable, err)
	}
	return p, nil
}

// planSQL reads stream's plan with its chunks, one row per chunk.
func planSQL(stream string) string {
	return "SELECT p.`epoch`, p.`position`, p.`started_at`, p.`handed_off_at`, c.`table_name`, c.`n`, c.`bound_from`, c.`bound_to`, " +
		"c.`done`, c.`rows`, c.`bytes`, c.`epoch`, c.`copies`, c.`at`\nFROM `" + copyPlanTable + "` p LEFT JOIN `" + copyChunkTable +
		"` c ON c.`stream` = p.`stream`\nWHERE p.`stream` = " + lit(stream) + "\nORDER BY c.`table_name`, c.`n`"
}

// scanPlan reads planSQL's rows: nil when the stream has no plan.
func scanPlan(rows *sql.Rows, stream string) (*tablecopy.Plan, error) {
	var p *tablecopy.Plan
	for rows.Next() {
		var (
			epoch             int
			pos               string
			started           time.Time
			handedOff         sql.NullTime
			table, from, to   sql.NullString
			n, cEpoch, copies sql.NullInt64
			nrows, nbytes     sql.NullInt64
			done              sql.NullBool
			at                sql.NullTime
		)
		if err := rows.Scan(&epoch, &pos, &started, &handedOff, &table, &n, &from, &to, &done, &nrows, &nbytes, &cEpoch, &copies, &at); err != nil {
			return nil, err
		}
		var err error
		if p == nil {
			p = &tablecopy.Plan{Stream: stream, Epoch: epoch, Started: started.UTC()}
			if handedOff.Valid {
				p.HandedOff = handedOff.Time.UTC()
			}
			if p.Position, err = sluice.ParsePosition(pos); err != nil {
				return nil, err
			}
		}
		if !table.Valid {
			continue // a plan without chunks
		}
		cs := tablecopy.ChunkState{Done: done.Bool, Rows: nrows.Int64, Bytes: nbytes.Int64,
			Epoch: int(cEpoch.Int64), Copies: int(copies.Int64)}
		if at.Valid {
			cs.At = at.Time.UTC()
		}
		cs.N = int(n.Int64)
		if cs.Table, err = sluice.ParseTableName(table.String); err != nil {
			return nil, err
		}
		if cs.Range.From, err = tablecopy.DecodeBound(from.String); err != nil {
			return nil, fmt.Errorf("table %s chunk %d: %w", table.String, cs.N, err)
		}
		if cs.Range.To, err = tablecopy.DecodeBound(to.String); err != nil {
			return nil, fmt.Errorf("table %s chunk %d: %w", table.String, cs.N, err)
		}
		p.Chunks = append(p.Chunks, cs)
	}
	return p, rows.Err()
}

// WritePlan creates the plan tables when missing and records p: the plan
// row (its started_at kept once written) and a not-done row for each chunk
// that has none, leaving existing chunk rows as they are, in one
// transaction.
func (t *Target) WritePlan(ctx context.Context, p *tablecopy.Plan) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if err := t.ensureConn(ctx); err != nil {
		return err
	}
	s := t.newCopySession()
	err := t.writePlan(ctx, s, p)
	if err != nil {
		s.abort(ctx, err)
		if f := t.copyFenceError(p.Stream, err); f != nil {
			return f
		}
		hint := ""
		var me *mysql.MySQLError
		if errors.As(err, &me) && (me.Number == 1142 || me.Number == 1044) { // ER_TABLEACCESS_DENIED_ERROR, ER_DBACCESS_DENIED_ERROR
			hint = " (grant the user CREATE, INSERT and UPDATE on the database: the copy keeps its plan there)"
		}
		return fmt.Errorf("write copy plan of stream %q to target %s.%s%s: %w", p.Stream, t.database, copyPlanTable, hint, err)
	}
	return nil
}

func (t *Target) writePlan(ctx context.Context, s *copySession, p *tablecopy.Plan) error {
	// DDL commits implicitly: it goes before the transaction.
	if err := s.exec(ctx, copyPlanDDL); err != nil {
		return err
	}
	if err := s.exec(ctx, copyChunkDDL); err != nil {
		return err
	}
	if t.implicitTx {
		// autocommit = 0: the next statement opens the transaction.
	} else if err := s.exec(ctx, "START TRANSACTION"); err != nil {
		return err
	}
	if err := s.fence(ctx, p.Stream); err != nil {
		return err
	}
	started := "NOW(6)"
	if !p.Started.IsZero() {
		started = lit(p.Started.UTC().Format("2006-01-02 15:04:05.000000"))
	}
	plan := "INSERT INTO `" + copyPlanTable + "` (`stream`, `epoch`, `position`, `started_at`, `updated_at`) VALUES (" +
		lit(p.Stream) + ", " + strconv.Itoa(p.Epoch) + ", " + lit(p.Position.String()) + ", " + started + ", NOW(6))\n" +
		"ON DUPLICATE KEY UPDATE `epoch` = VALUES(`epoch`), `position` = VALUES(`position`), `updated_at` = VALUES(`updated_at`)"
	if err := s.exec(ctx, plan); err != nil {
		return err
	}
	const head = "INSERT INTO `" + copyChunkTable + "` (`stream`, `table_name`, `n`, `bound_from`, `bound_to`) VALUES\n"
	// A duplicate changes nothing: an existing chunk record is kept. (Not
	// INSERT IGNORE, which would also turn a too-long value into a
	// warning.)
	const tail = "\nON DUPLICATE KEY UPDATE `n` = `n`"
	var b strings.Builder
	for i, c := range p.Chunks {
		var v strings.Builder
		v.WriteByte('(')
		quoteString(&v, p.Stream)
		v.WriteString(", ")
		quoteString(&v, c.Table.String())
		v.WriteString(", " + strconv.Itoa(c.N) + ", ")
		quoteString(&v, tablecopy.EncodeBound(c.Range.From))
		v.WriteString(", ")
		quoteString(&v, tablecopy.EncodeBound(c.Range.To))
		v.WriteByte(')')
		if b.Len() > 0 && b.Len()+v.Len()+len(tail)+2 > s.limit {
			b.WriteString(tail)
			if err := s.exec(ctx, b.String()); err != nil {
				return err
			}
			b.Reset()
		}
		if b.Len() == 0 {
			b.WriteString(head)
		} else {
			b.WriteString(",\n")
		}
		b.WriteString(v.String())
		if i == len(p.Chunks)-1 {
			b.WriteString(tail)
			if err := s.exec(ctx, b.String()); err != nil {
				return err
			}
		}
	}
	if err := s.exec(ctx, "COMMIT"); err != nil {
		return err
	}
	return s.flush(ctx)
}

// RowCount tells whether the target table holds rows: 0 when it is empty,
// otherwise the catalog's estimate, at least 1.
func (t *Target) RowCount(ctx context.Context, name sluice.TableName) (int64, error) {
	n, err := t.RowCounts(ctx, []sluice.TableName{name})
	if err != nil {
		return 0, err
	}
	return n[0], nil
}

// RowCounts is RowCount of several tables: in one round trip with
// multi-statement packets.
func (t *Target) RowCounts(ctx context.Context, names []sluice.TableName) ([]int64, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	qs := make([]string, len(names))
	for i, name := range names {
		schema := "DATABASE()"
		if name.Schema != "" {
			schema = lit(name.Schema)
		}
		qs[i] = "SELECT IF(EXISTS(SELECT 1 FROM " + tableIdent(name) + "), GREATEST(1, COALESCE((SELECT TABLE_ROWS FROM information_schema.TABLES WHERE TABLE_SCHEMA = " +
			schema + " AND TABLE_NAME = " + lit(name.Name) + "), 1)), 0)"
	}
	out := make([]int64, len(names))
	done := 0
	err := t.reading(ctx, func() error {
		done = 0
		if !t.multi || len(qs) == 1 {
			for done < len(qs) {
				if err := t.conn.QueryRowContext(ctx, qs[done]).Scan(&out[done]); err != nil {
					return err
				}
				done++
			}
			return nil
		}
		rows, err := t.conn.QueryContext(ctx, strings.Join(qs, ";\n"))
		if err != nil {
			return err
		}
		defer rows.Close()
		for {
			if !rows.Next() {
				if err := rows.Err(); err != nil {
					return err
				}
				return fmt.Errorf("no row for table %s", names[done])
			}
			if err := rows.Scan(&out[done]); err != nil {
				return err
			}
			done++
			if done == len(qs) {
				return nil
			}
			if !rows.NextResultSet() {
				if err := rows.Err(); err != nil {
					return err
				}
				return fmt.Errorf("no result for table %s", names[done])
			}
		}
	})
	var failed sluice.TableName
	if done < len(names) {
		failed = names[done]
	}
	var me *mysql.MySQLError
	if errors.As(err, &me) && me.Number == 1146 {
		return nil, fmt.Errorf("target table %s does not exist: create it with the source's columns and primary key (sluice schema apply creates it from the source's definition, as sync start does with --create-tables on): %w", failed, err)
	}
	if err != nil {
		return nil, fmt.Errorf("count rows of target table %s: %w", failed, err)
	}
	return out, nil
}

// chunkWriter builds a chunk's INSERTs as its rows arrive, sending each
// once it is full, so that it holds about one statement.
type chunkWriter struct {
	d        *tableDesc
	s        *copySession
	head     string
	cols     []sqlColumn // the columns written: all but the generated ones
	written  []int       // their indexes in a row
	maxStmt  int         // what one statement may hold: a lone row may exceed the limit up to this
	b        strings.Builder
	stmtRows int
	rows     int64
	bytes    int64
}

func (w *chunkWriter) add(ctx context.Context, r sluice.Row) error {
	if len(r) != len(w.d.cols) {
		return fmt.Errorf("row has %d values, want %d", len(r), len(w.d.cols))
	}
	for _, i := range w.written {
		if r[i].Unchanged {
			return fmt.Errorf("row %s: column %s has no value (unchanged): a copy needs every value", w.d.src.FormatKey(w.d.src.KeyOf(r)), w.d.cols[i].Name)
		}
	}
	n := tupleLen(w.cols, w.written, r) + 2
	if w.stmtRows > 0 && w.b.Len()+n > w.s.limit {
		if err := w.flush(ctx); err != nil {
			return err
		}
	}
	if len(w.head)+n > w.maxStmt {
		return fmt.Errorf("row %s: %w (%d bytes as SQL; raise max_allowed_packet on the target)", w.d.src.FormatKey(w.d.src.KeyOf(r)), errRowTooBig, n)
	}
	if w.stmtRows == 0 {
		w.b.WriteString(w.head)
	} else {
		w.b.WriteString(",\n")
	}
	writeTuple(&w.b, w.cols, w.written, r)
	w.stmtRows++
	w.rows++
	for _, v := range r {
		if !v.Null {
			w.bytes += int64(len(v.Text))
		}
	}
	return nil
}

// flush queues the statement built so far (which sends the packet before
// it when the two would not fit together).
func (w *chunkWriter) flush(ctx context.Context) error {
	if w.stmtRows == 0 {
		return nil
	}
	q := w.b.String()
	w.b.Reset()
	w.stmtRows = 0
	if err := w.s.exec(ctx, q); err != nil {
		return err
	}
	if w.s.multi {
		// Send now: a statement was full, so the packet is.
		return w.s.flush(ctx)
	}
	return nil
}

// WriteChunk writes a chunk's rows and its done record in one transaction
// (see the comment at the top for its round trips). With replace the
// chunk's range is deleted first.
func (t *Target) WriteChunk(ctx context.Context, stream string, epoch int, tbl *sluice.Table, c tablecopy.Chunk, replace bool, rows tablecopy.Rows) (tablecopy.ChunkState, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	cs, err := t.writeChunk(ctx, stream, epoch, tbl, c, replace, rows)
	if f := t.copyFenceError(stream, err); f != nil {
		return tablecopy.ChunkState{}, f
	}
	if err != nil {
		// classify marks a killed transaction or a lost connection as an
		// *apply.RetryableError, as Apply does.
		return tablecopy.ChunkState{}, fmt.Errorf("copy %s of stream %q to target %s: %w", c, stream, t.database, classify(err, connLost(err)))
	}
	return cs, nil
}

func (t *Target) writeChunk(ctx context.Context, stream string, epoch int, tbl *sluice.Table, c tablecopy.Chunk, replace bool, rows tablecopy.Rows) (tablecopy.ChunkState, error) {
	if err := t.ensureConn(ctx); err != nil {
		return tablecopy.ChunkState{}, err
	}
	d, err := t.describe(ctx, tbl)
	if err != nil {
		return tablecopy.ChunkState{}, err
	}
	s := t.newCopySession()
	w := &chunkWriter{d: d, s: s, written: d.written, maxStmt: t.maxPacket - 1024}
	for _, i := range d.written {
		w.cols = append(w.cols, d.cols[i])
	}
	w.head = (&upsertSpec{table: d.ident, cols: w.cols}).head()
	cs := tablecopy.ChunkState{Chunk: c, Done: true, Epoch: epoch}
	err = func() error {
		if err := s.begin(ctx, stream); err != nil {
			return err
		}
		if replace {
			if err := s.ranged(ctx, c.Range, "DELETE FROM "+d.ident+" WHERE "+keyrange.My(quotedKey(tbl), c.Range), nil); err != nil {
				return fmt.Errorf("delete the chunk's range: %w", err)
			}
		}
		var emitErr error
		err := rows(func(batch []sluice.Row) error {
			for _, r := range batch {
				if err := w.add(ctx, r); err != nil {
					emitErr = err
					return err
				}
			}
			return nil
		})
		if emitErr != nil {
			return emitErr
		}
		if err != nil {
			return fmt.Errorf("read from the source: %w", err)
		}
		if err := w.flushLast(ctx); err != nil {
			return err
		}
		cs.Rows, cs.Bytes = w.rows, w.bytes
		if err := s.exec(ctx, buildChunkDone(stream, epoch, c, w.rows, w.bytes)); err != nil {
			return err
		}
		sel := "SELECT `copies`, `at` FROM `" + copyChunkTable + "` WHERE `stream` = " + lit(stream) + " AND `table_name` = " +
			lit(c.Table.String()) + " AND `n` = " + strconv.Itoa(c.N)
		if err := s.query(ctx, sel, func(r *sql.Rows) error {
			if !r.Next() {
				return errors.New("the chunk's record is missing after it was written")
			}
			return r.Scan(&cs.Copies, &cs.At)
		}); err != nil {
			return err
		}
		if err := s.commit(ctx); err != nil && connLost(err) {
			return fmt.Errorf("%w (the connection was lost at commit: whether the chunk committed is unknown; copy it again with replace)", err)
		} else if err != nil {
			return err
		}
		return nil
	}()
	if err != nil {
		s.abort(ctx, err)
		if isNoTable(err) {
			clear(t.tables)
		}
		return tablecopy.ChunkState{}, err
	}
	cs.At = cs.At.UTC()
	return cs, nil
}

// flushLast queues the last INSERT without sending it: it goes in one
// packet with the done record and COMMIT.
func (w *chunkWriter) flushLast(ctx context.Context) error {
	if w.stmtRows == 0 {
		return nil
	}
	q := w.b.String()
	w.b.Reset()
	w.stmtRows = 0
	return w.s.exec(ctx, q)
}

// buildChunkDone returns the upsert of a chunk's done record.
func buildChunkDone(stream string, epoch int, c tablecopy.Chunk, rows, bytes int64) string {
	var b strings.Builder
	b.WriteString("INSERT INTO `" + copyChunkTable + "` (`stream`, `table_name`, `n`, `bound_from`, `bound_to`, `done`, `rows`, `bytes`, `epoch`, `copies`, `at`) VALUES (")
	quoteString(&b, stream)
	b.WriteString(", ")
	quoteString(&b, c.Table.String())
	b.WriteString(", " + strconv.Itoa(c.N) + ", ")
	quoteString(&b, tablecopy.EncodeBound(c.Range.From))
	b.WriteString(", ")
	quoteString(&b, tablecopy.EncodeBound(c.Range.To))
	fmt.Fprintf(&b, ", 1, %d, %d, %d, 1, NOW(6))\n", rows, bytes, epoch)
	b.WriteString("ON DUPLICATE KEY UPDATE `done` = 1, `rows` = VALUES(`rows`), `bytes` = VALUES(`bytes`), `epoch` = VALUES(`epoch`), " +
		"`copies` = `copies` + 1, `at` = VALUES(`at`)")
	return b.String()
}

func quotedKey(tbl *sluice.Table) []string {
	k := make([]string, len(tbl.Key))
	for i, c := range tbl.Key {
		k[i] = quoteIdent(tbl.Columns[c].Name)
	}
	return k
}

// ResetTable deletes every row of the target table and marks its chunks
// not done, in one transaction.
func (t *Target) ResetTable(ctx context.Context, stream string, tbl *sluice.Table) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if err := t.ensureConn(ctx); err != nil {
		return err
	}
	s := t.newCopySession()
	err := func() error {
		if err := s.begin(ctx, stream); err != nil {
			return err
		}
		if err := s.exec(ctx, "DELETE FROM "+tableIdent(tbl.Name)); err != nil {
			return err
		}
		if err := s.exec(ctx, "UPDATE `"+copyChunkTable+"` SET `done` = 0 WHERE `stream` = "+lit(stream)+" AND `table_name` = "+lit(tbl.Name.String())); err != nil {
			return err
		}
		return s.commit(ctx)
	}()
	if err != nil {
		s.abort(ctx, err)
		if f := t.copyFenceError(stream, err); f != nil {
			return f
		}
		return fmt.Errorf("reset copy of table %s of stream %q on target %s: %w", tbl.Name, stream, t.database, err)
	}
	return nil
}

// Digest computes keyrange's digest of a range of the target table over the
// source's columns.
func (t *Target) Digest(ctx context.Context, tbl *sluice.Table, r tablecopy.Range) (tablecopy.Digest, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	cols := make([]string, len(tbl.Columns))
	for i, c := range tbl.Columns {
		cols[i] = keyrange.MyDigestColumn(quoteIdent(c.Name), c.Type)
	}
	q := keyrange.MyDigest(tableIdent(tbl.Name), cols, keyrange.My(quotedKey(tbl), r))
	var dg tablecopy.Digest
	err := t.reading(ctx, func() error {
		s := t.newCopySession()
		err := func() error {
			if err := s.exec(ctx, keyrange.MySession); err != nil {
				return err
			}
			if err := s.ranged(ctx, r, q, func(rows *sql.Rows) error {
				if !rows.Next() {
					return errors.New("the digest query returned no row")
				}
				return rows.Scan(&dg.Rows, &dg.Sum)
			}); err != nil {
				return err
			}
			return s.flush(ctx)
		}()
		if err != nil && needsEscapes(r) && s.sent && !connLost(err) {
			// Leave the session's sql_mode as it was.
			if _, rerr := t.conn.ExecContext(ctx, "SET SESSION sql_mode = '"+sqlMode+"'"); rerr != nil {
				t.discard()
			}
		}
		return err
	})
	if err != nil {
		return tablecopy.Digest{}, fmt.Errorf("digest of target table %s range %s: %w", tbl.Name, r, err)
	}
	return dg, nil
}

// FinishCopy records that the stream's copy handed off to the stream at
// pos.
func (t *Target) FinishCopy(ctx context.Context, stream string, pos sluice.Position) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if err := t.ensureConn(ctx); err != nil {
		return err
	}
	q := "UPDATE `" + copyPlanTable + "` SET `handed_off_at` = NOW(6), `updated_at` = NOW(6), `handoff_position` = " + lit(pos.String()) +
		" WHERE `stream` = " + lit(stream)
	res, err := t.conn.ExecContext(ctx, q)
	var n int64
	if err == nil {
		n, err = res.RowsAffected()
	}
	if err == nil && t.implicitTx {
		_, err = t.conn.ExecContext(ctx, "COMMIT")
	}
	if err == nil && n == 0 {
		err = errors.New("the stream has no copy plan")
	}
	if err != nil {
		if connLost(err) {
			t.discard()
		} else if t.implicitTx {
			t.conn.ExecContext(ctx, "ROLLBACK")
		}
		return fmt.Errorf("record the hand-off of stream %q's copy on target %s.%s: %w", stream, t.database, copyPlanTable, err)
	}
	return nil
}
