package postgres

// The initial copy's side of a PostgreSQL target (tablecopy.Target): the
// plan tables in sluice's schema, a chunk written with COPY in the same
// transaction as its done record, and the digest of a range computed by the
// server.

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/sluice-cdc/sluice"
	"github.com/sluice-cdc/sluice/tablecopy"
	"github.com/sluice-cdc/sluice/tablecopy/keyrange"
)

var (
	_ tablecopy.Target     = (*Target)(nil)
	_ tablecopy.CopyTarget = (*Target)(nil)
)

// copyFlushSize is how much COPY text a chunk's encoder gathers before it
// hands it to the connection: the memory a chunk costs beyond the batch the
// source's reader holds.
const copyFlushSize = 64 << 10

// errCopyEnded unblocks a chunk's producer once the server stopped reading
// its COPY data (a failed row): the server's error is the one reported.
var errCopyEnded = errors.New("target stopped reading the copy")

func copyPlanTable(schema string) string  { return pgx.Identifier{schema, "copy_plan"}.Sanitize() }
func copyChunkTable(schema string) string { return pgx.Identifier{schema, "copy_chunk"}.Sanitize() }

// buildCopyPlanDDL returns the statements that create the copy's plan
// tables. Open creates them in its setup round trip (where it also reads
// the stream's plan), and the first WritePlan in its transaction.
func buildCopyPlanDDL(schema string) []string {
	return []string{
		"CREATE SCHEMA IF NOT EXISTS " + ident(schema),
		"CREATE TABLE IF NOT EXISTS " + copyPlanTable(schema) + " (\n" +
			"\tstream text PRIMARY KEY,\n" +
			"\tepoch integer NOT NULL,\n" +
			"\tposition text NOT NULL,\n" +
			"\tstarted_at timestamptz NOT NULL,\n" +
			"\tupdated_at timestamptz NOT NULL,\n" +
			"\thanded_off_at timestamptz,\n" +
			"\thandoff_position text\n" +
			")",
		"CREATE TABLE IF NOT EXISTS " + copyChunkTable(schema) + " (\n" +
			"\tstream text NOT NULL,\n" +
			"\ttable_name text NOT NULL,\n" +
			"\tn integer NOT NULL,\n" +
			"\tbound_from text NOT NULL,\n" +
			"\tbound_to text NOT NULL,\n" +
			"\tdone boolean NOT NULL,\n" +
			"\trows bigint NOT NULL,\n" +
			"\tbytes bigint NOT NULL,\n" +
			"\tepoch integer NOT NULL,\n" +
			"\tcopies integer NOT NULL,\n" +
			"\tat timestamptz NOT NULL,\n" +
			"\tPRIMARY KEY (stream, table_name, n)\n" +
			")",
	}
}

// buildCopyPlanUpsert records a plan's epoch and position; started_at stays
// what the first epoch wrote, and a plan written again is a copy under way,
// not handed off. Parameters: stream, epoch, position, started_at (NULL for
// now).
func buildCopyPlanUpsert(schema string) string {
	return "INSERT INTO " + copyPlanTable(schema) + " (stream, epoch, position, started_at, updated_at)\n" +
		"VALUES ($1, $2::integer, $3, coalesce($4::timestamptz, now()), now())\n" +
		"ON CONFLICT (stream) DO UPDATE SET epoch = EXCLUDED.epoch, position = EXCLUDED.position, " +
		"updated_at = EXCLUDED.updated_at, handed_off_at = NULL, handoff_position = NULL"
}

// buildCopyChunksInsert adds the chunks that have no record yet, passed
// column-wise as text[] (table names, numbers, bounds); a chunk that has
// one keeps it. Parameters: stream and the four arrays.
func buildCopyChunksInsert(schema string) string {
	return "INSERT INTO " + copyChunkTable(schema) + " (stream, table_name, n, bound_from, bound_to, done, rows, bytes, epoch, copies, at)\n" +
		"SELECT $1, u.t, u.n::integer, u.f, u.b, false, 0, 0, 0, 0, now()\n" +
		"FROM unnest($2::text[], $3::text[], $4::text[], $5::text[]) AS u(t, n, f, b)\n" +
		"ON CONFLICT (stream, table_name, n) DO NOTHING"
}

// buildCopyChunkDoneOf marks a chunk done in its copy's transaction and
// returns its copies and time; v holds the values, as literals or
// parameter references: stream, table, n, bound_from, bound_to, rows,
// bytes, epoch.
func buildCopyChunkDoneOf(schema string, v [8]string) string {
	return "INSERT INTO " + copyChunkTable(schema) + " AS c (stream, table_name, n, bound_from, bound_to, done, rows, bytes, epoch, copies, at)\n" +
		"VALUES (" + v[0] + ", " + v[1] + ", " + v[2] + "::integer, " + v[3] + ", " + v[4] + ", true, " + v[5] + "::bigint, " + v[6] + "::bigint, " + v[7] + "::integer, 1, now())\n" +
		"ON CONFLICT (stream, table_name, n) DO UPDATE SET done = true, rows = EXCLUDED.rows, bytes = EXCLUDED.bytes, " +
		"epoch = EXCLUDED.epoch, copies = c.copies + 1, at = EXCLUDED.at\n" +
		"RETURNING copies, at"
}

// buildCopyChunkDoneLiteral is buildCopyChunkDoneOf with its values written
// in (it runs in a simple query, after the chunk's COPY).
func buildCopyChunkDoneLiteral(schema, stream string, c tablecopy.Chunk, rows, bytes int64, epoch int) string {
	return buildCopyChunkDoneOf(schema, [8]string{keyrange.PGLiteral(stream), keyrange.PGLiteral(c.Table.String()), strconv.Itoa(c.N),
		keyrange.PGLiteral(tablecopy.EncodeBound(c.Range.From)), keyrange.PGLiteral(tablecopy.EncodeBound(c.Range.To)),
		strconv.FormatInt(rows, 10), strconv.FormatInt(bytes, 10), strconv.Itoa(epoch)})
}

// ReadPlan returns the stream's copy plan, nil when it has none, in one
// round trip: whether the plan tables exist is asked in the same pipeline
// as their rows, and the error of reading a table that does not exist is
// then the expected answer, not a failure.
func (t *Target) ReadPlan(ctx context.Context, stream string) (*tablecopy.Plan, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if pre := t.pre; pre != nil && pre.havePlan && pre.stream == stream {
		pre.havePlan = false
		return pre.plan, nil
	}
	var p *tablecopy.Plan
	err := t.reading(ctx, func() (err error) {
		p, err = t.readPlan(ctx, stream)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("read copy plan of stream %q from %s.copy_plan on target PostgreSQL at %s: %w", stream, t.cfg.Schema, t.addr, err)
	}
	return p, nil
}

func (t *Target) readPlan(ctx context.Context, stream string) (*tablecopy.Plan, error) {
	var exists bool
	b := &pgx.Batch{}
	b.Queue("SELECT to_regclass($1) IS NOT NULL AND to_regclass($2) IS NOT NULL",
		copyPlanTable(t.cfg.Schema), copyChunkTable(t.cfg.Schema)).QueryRow(func(r pgx.Row) error {
		return r.Scan(&exists)
	})
	var p *tablecopy.Plan
	t.queuePlan(b, stream, &p)
	err := t.conn.SendBatch(ctx, b).Close()
	if !exists {
		var pgErr *pgconn.PgError
		if err == nil || errors.As(err, &pgErr) && pgErr.Code == "42P01" { // undefined_table
			return nil, nil
		}
		return nil, err
	}
	if err != nil {
		return nil, err
	}
	return p, nil
}

// queuePlan queues the reading of stream's plan and chunks; *out is the
// plan, with its chunks, once the batch ran (nil when there is none).
func (t *Target) queuePlan(b *pgx.Batch, stream string, out **tablecopy.Plan) {
	b.Queue("SELECT epoch, position, started_at, handed_off_at FROM "+copyPlanTable(t.cfg.Schema)+" WHERE stream = $1", stream).QueryRow(func(r pgx.Row) error {
		var pos string
		var handedOff *time.Time
		pl := &tablecopy.Plan{Stream: stream}
		if err := r.Scan(&pl.Epoch, &pos, &pl.Started, &handedOff); err != nil {
			if errors.Is(err, pgx.ErrNoRows) {
				return nil
			}
			return err
		}
		var err error
		if pl.Position, err = sluice.ParsePosition(pos); err != nil {
			return fmt.Errorf("position %q: %w", pos, err)
		}
		if handedOff != nil {
			pl.HandedOff = handedOff.UTC()
		}
		*out = pl
		return nil
	})
	b.Queue(`SELECT table_name, n, bound_from, bound_to, done, rows, bytes, epoch, copies, at FROM `+copyChunkTable(t.cfg.Schema)+
		` WHERE stream = $1 ORDER BY table_name COLLATE "C", n`, stream).Query(func(rows pgx.Rows) error {
		var chunks []tablecopy.ChunkState
		for rows.Next() {
			var cs tablecopy.ChunkState
			var name, from, to string
			if err := rows.Scan(&name, &cs.N, &from, &to, &cs.Done, &cs.Rows, &cs.Bytes, &cs.Epoch, &cs.Copies, &cs.At); err != nil {
				return err
			}
			var err error
			if cs.Table, err = sluice.ParseTableName(name); err != nil {
				return fmt.Errorf("chunk %d: %w", cs.N, err)
			}
			if cs.Range.From, err = tablecopy.DecodeBound(from); err == nil {
				cs.Range.To, err = tablecopy.DecodeBound(to)
			}
			if err != nil {
				return fmt.Errorf("%s chunk %d: %w", name, cs.N, err)
			}
			chunks = append(chunks, cs)
		}
		if err := rows.Err(); err != nil {
			return err
		}
		if *out != nil {
			(*out).Chunks = chunks
		}
		return nil
	})
}

// WritePlan records p's epoch and position and a not-done record for each
// of its chunks that has none, in one transaction and one round trip, the
// plan tables' creation included.
func (t *Target) WritePlan(ctx context.Context, p *tablecopy.Plan) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if err := t.ensureConn(ctx); err != nil {
		return err
	}
	var started any
	if !p.Started.IsZero() {
		started = p.Started.UTC().Format("2006-01-02 15:04:05.999999Z07:00")
	}
	var names, ns, froms, tos strings.Builder
	if len(p.Chunks) > 0 {
		var cols [4][]string
		for _, c := range p.Chunks {
			cols[0] = append(cols[0], c.Table.String())
			cols[1] = append(cols[1], strconv.Itoa(c.N))
			cols[2] = append(cols[2], tablecopy.EncodeBound(c.Range.From))
			cols[3] = append(cols[3], tablecopy.EncodeBound(c.Range.To))
		}
		textArray(&names, cols[0], nil)
		textArray(&ns, cols[1], nil)
		textArray(&froms, cols[2], nil)
		textArray(&tos, cols[3], nil)
	}
	write := func() error {
		b := &pgx.Batch{}
		b.Queue("BEGIN")
		if t.copyFenced(p.Stream) {
			b.Queue(buildFenceCheck(t.cfg.Schema), p.Stream, t.gen)
		}
		for _, s := range buildCopyPlanDDL(t.cfg.Schema) {
			b.Queue(s)
		}
		b.Queue(buildCopyPlanUpsert(t.cfg.Schema), p.Stream, strconv.Itoa(p.Epoch), p.Position.String(), started)
		if len(p.Chunks) > 0 {
			b.Queue(buildCopyChunksInsert(t.cfg.Schema), p.Stream, names.String(), ns.String(), froms.String(), tos.String())
		}
		return t.execTx(ctx, b)
	}
	err := write()
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && (pgErr.Code == "23505" || pgErr.Code == "42P07") && !t.conn.IsClosed() {
		// Two workers racing through CREATE ... IF NOT EXISTS: the loser
		// fails on the catalog's unique index; the tables exist now.
		err = write()
	}
	if f := fenced(err); f != nil {
		return f
	}
	if err != nil {
		return fmt.Errorf("write copy plan of stream %q (epoch %d, %d chunks) to %s.copy_plan on target PostgreSQL at %s: %w (sluice needs CREATE on its schema %s)",
			p.Stream, p.Epoch, len(p.Chunks), t.cfg.Schema, t.addr, err, t.cfg.Schema)
	}
	return nil
}

// execTx sends b, a transaction from BEGIN on, with COMMIT queued after it,
// in one round trip, and leaves the connection idle (or closed) whatever
// happens.
func (t *Target) execTx(ctx context.Context, b *pgx.Batch) error {
	var commit pgconn.CommandTag
	b.Queue("COMMIT").Exec(func(ct pgconn.CommandTag) error {
		commit = ct
		return nil
	})
	err := t.conn.SendBatch(ctx, b).Close()
	if err == nil && commit.String() != "COMMIT" {
		// A COMMIT of an aborted transaction reports ROLLBACK.
		err = fmt.Errorf("commit reported %q", commit.String())
	}
	if err != nil {
		t.rollback(ctx)
	}
	return err
}

// rollback leaves the connection idle after a failed transaction, or
// closes it when that fails (the server then rolls back). It reports
// whether the connection is gone.
func (t *Target) rollback(ctx context.Context) (lost bool) {
	if t.conn == nil || t.conn.IsClosed() {
		return true
	}
	if t.conn.PgConn().TxStatus() == 'I' {
		return false
	}
	if _, err := t.conn.Exec(ctx, "ROLLBACK"); err == nil {
		return false
	}
	t.conn.Close(context.WithoutCancel(ctx))
	return true
}

// RowCount returns 0 when the target table is empty, otherwise the
// planner's estimate of its rows, at least 1, in one cheap query.
func (t *Target) RowCount(ctx context.Context, name sluice.TableName) (int64, error) {
	n, err := t.RowCounts(ctx, []sluice.TableName{name})
	if err != nil {
		return 0, err
	}
	return n[0], nil
}

// RowCounts is RowCount of several tables in one round trip.
func (t *Target) RowCounts(ctx context.Context, names []sluice.TableName) ([]int64, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]int64, len(names))
	var failed sluice.TableName
	err := t.reading(ctx, func() error {
		b := &pgx.Batch{}
		for i, name := range names {
			id := tableIdent(name)
			// reltuples is -1 for a table never vacuumed or analyzed (15+),
			// 0 for one analyzed while empty: greatest keeps a table with
			// rows at 1 or more.
			b.Queue("SELECT CASE WHEN EXISTS (SELECT 1 FROM "+id+" LIMIT 1) THEN "+
				"greatest(1, (SELECT reltuples::bigint FROM pg_class WHERE oid = to_regclass($1))) ELSE 0 END", id).QueryRow(func(r pgx.Row) error {
				err := r.Scan(&out[i])
				if err != nil && failed == (sluice.TableName{}) {
					failed = name
				}
				return err
			})
		}
		return t.conn.SendBatch(ctx, b).Close()
	})
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "42P01" {
		return nil, fmt.Errorf("target table %s does not exist on PostgreSQL at %s: create it with the source's columns and primary key (sluice schema apply creates it from the source's definition, as sync start does with --create-tables on): %w", failed, t.addr, err)
	}
	if err != nil {
		return nil, fmt.Errorf("count rows of target table %s on PostgreSQL at %s: %w", failed, t.addr, err)
	}
	return out, nil
}

// copyKeyColumns returns the quoted primary key columns of tbl after checking
// that r's bounds fit them.
func copyKeyColumns(tbl *sluice.Table, r tablecopy.Range) ([]string, error) {
	keys := make([]string, len(tbl.Key))
	for i, k := range tbl.Key {
		keys[i] = ident(tbl.Columns[k].Name)
	}
	if len(keys) == 0 && !r.Whole() {
		return nil, fmt.Errorf("table has no primary key, so its only range is the whole table, not %s", r)
	}
	if len(r.From) > len(keys) || len(r.To) > len(keys) {
		return nil, fmt.Errorf("range %s has more values than the primary key (%s) has columns", r, strings.Join(tbl.KeyNames(), ", "))
	}
	for _, k := range []sluice.Row{r.From, r.To} {
		for _, v := range k {
			if v.Null || v.Unchanged {
				return nil, fmt.Errorf("range %s has a NULL bound value, which no primary key holds", r)
			}
		}
	}
	return keys, nil
}

// copyColumns returns the quoted source columns of tbl.
func copyColumns(tbl *sluice.Table) []string {
	cols := make([]string, len(tbl.Columns))
	for i, c := range tbl.Columns {
		cols[i] = ident(c.Name)
	}
	return cols
}

// WriteChunk writes a chunk with COPY in its own transaction with the
// chunk's done record, in one round trip besides the data (see copyIn):
// one simple query "BEGIN; [SET LOCAL session_replication_role = replica;]
// [the fence check (fence.go);] [DELETE the chunk's range;] COPY ... FROM
// STDIN", the COPY data streaming
// right behind it without waiting for the server's CopyInResponse, then
// the done record and COMMIT as a second simple query, also sent without
// waiting.
func (t *Target) WriteChunk(ctx context.Context, stream string, epoch int, tbl *sluice.Table, c tablecopy.Chunk, replace bool, rows tablecopy.Rows) (tablecopy.ChunkState, error) {
	return t.writeChunkWith(ctx, stream, epoch, tbl, c, replace, func(w io.Writer) (int64, int64, error) {
		enc := &copyEncoder{w: w, tbl: tbl}
		err := rows(enc.emit)
		if err == nil {
			err = enc.flush()
		}
		return enc.rows, enc.bytes, err
	})
}

// WriteChunkCopy is WriteChunk for rows a PostgreSQL source writes as COPY
// text itself (tablecopy.CopyReader): copyOut writes them into w and returns
// how many it wrote. The bytes pass through unparsed.
func (t *Target) WriteChunkCopy(ctx context.Context, stream string, epoch int, tbl *sluice.Table, c tablecopy.Chunk, replace bool, copyOut func(w io.Writer) (int64, error)) (tablecopy.ChunkState, error) {
	return t.writeChunkWith(ctx, stream, epoch, tbl, c, replace, func(w io.Writer) (int64, int64, error) {
		// The source writes a row at a time: the pipe to CopyFrom, and so
		// the target's socket, get them in copyFlushSize pieces instead.
		bw := bufio.NewWriterSize(w, copyFlushSize)
		cw := &countingWriter{w: bw}
		n, err := copyOut(cw)
		if err == nil {
			err = bw.Flush()
		}
		return n, cw.n, err
	})
}

// countingWriter counts the bytes written through it.
type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// produceFunc writes a chunk's rows as COPY text into w and returns the rows
// and bytes it wrote.
type produceFunc func(w io.Writer) (rows, bytes int64, err error)

func (t *Target) writeChunkWith(ctx context.Context, stream string, epoch int, tbl *sluice.Table, c tablecopy.Chunk, replace bool, produce produceFunc) (tablecopy.ChunkState, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	st, err := t.writeChunk(ctx, stream, epoch, tbl, c, replace, produce)
	if err != nil {
		lost := t.rollback(ctx)
		err = fmt.Errorf("copy %s (stream %q, epoch %d) to target PostgreSQL at %s: %w", c, stream, epoch, t.addr, err)
		if ctx.Err() == nil {
			err = classify(err, lost)
		}
		return tablecopy.ChunkState{}, &sluice.TableError{Table: tbl.Name, Err: err}
	}
	return st, nil
}

func (t *Target) writeChunk(ctx context.Context, stream string, epoch int, tbl *sluice.Table, c tablecopy.Chunk, replace bool, produce produceFunc) (tablecopy.ChunkState, error) {
	keys, err := copyKeyColumns(tbl, c.Range)
	if err != nil {
		return tablecopy.ChunkState{}, err
	}
	if err := t.ensureConn(ctx); err != nil {
		return tablecopy.ChunkState{}, err
	}
	if replace {
		if err := t.deleteFiresActions(ctx, tbl.Name, "copying a chunk again deletes its range first"); err != nil {
			return tablecopy.ChunkState{}, err
		}
	}
	id := tableIdent(tbl.Name)
	var q strings.Builder
	for _, s := range t.begin {
		q.WriteString(s)
		q.WriteString("; ")
	}
	fence := t.copyFenced(stream)
	if fence {
		q.WriteString(t.copyFenceLiteral(stream))
		q.WriteString("; ")
	}
	if replace {
		q.WriteString("DELETE FROM " + id + " WHERE " + keyrange.PG(keys, c.Range) + "; ")
	}
	q.WriteString("COPY " + id + " (" + strings.Join(copyColumns(tbl), ", ") + ") FROM STDIN")

	// The producer runs beside copyIn, which reads its text through the
	// pipe: a chunk never sits whole in memory. Closing the pipe's read end
	// unblocks the producer when the copy stops early (a failed row, a
	// cancelled context).
	pr, pw := io.Pipe()
	stop := context.AfterFunc(ctx, func() { pr.CloseWithError(ctx.Err()) })
	defer stop()
	var sent, bytes int64
	produced := make(chan error, 1)
	go func() {
		var err error
		sent, bytes, err = produce(pw)
		pw.CloseWithError(err) // nil: EOF
		produced <- err
	}()
	var prodErr error
	res, copyErr := copyIn(ctx, t.conn.PgConn(), pr, q.String(), func(readErr error) string {
		pr.CloseWithError(errCopyEnded)
		prodErr = <-produced
		if readErr != nil || prodErr != nil {
			return "ROLLBACK"
		}
		// The done record and the commit follow the data in the same
		// round trip.
		return buildCopyChunkDoneLiteral(t.cfg.Schema, stream, c, sent, bytes, epoch) + "; COMMIT"
	})
	var copyTag, lastTag pgconn.CommandTag
	for _, tag := range res.tags {
		if tag.String() != "" && strings.HasPrefix(tag.String(), "COPY") {
			copyTag = tag
		}
		lastTag = tag
	}
	switch {
	case prodErr != nil && !errors.Is(prodErr, errCopyEnded):
		// The producer failed (the source, or a row we cannot write); the
		// server's error is only the CopyFail it caused.
		return tablecopy.ChunkState{}, fmt.Errorf("read rows: %w", prodErr)
	case copyErr != nil:
		return tablecopy.ChunkState{}, copyErr
	case copyTag.RowsAffected() != sent:
		return tablecopy.ChunkState{}, fmt.Errorf("COPY wrote %d rows, sent %d", copyTag.RowsAffected(), sent)
	case lastTag.String() != "COMMIT" || len(res.rows) != 1+btoi(fence) || len(res.rows[len(res.rows)-1]) != 2:
		// COMMIT of a failed transaction answers ROLLBACK. (The fence
		// check answers a row of its own, before the done record's.)
		return tablecopy.ChunkState{}, fmt.Errorf("the chunk's transaction ended with %q, want COMMIT of its done record", lastTag)
	}
	done := res.rows[len(res.rows)-1]
	st := tablecopy.ChunkState{Chunk: c, Done: true, Rows: sent, Bytes: bytes, Epoch: epoch}
	var err2 error
	if st.Copies, err2 = strconv.Atoi(done[0]); err2 == nil {
		st.At, err2 = time.Parse("2006-01-02 15:04:05.999999-07", done[1])
	}
	if err2 != nil {
		return tablecopy.ChunkState{}, fmt.Errorf("read the chunk's done record %q: %w", done, err2)
	}
	return st, nil
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// copyEncoder turns rows into COPY text format, handing it on in pieces of
// about copyFlushSize.
type copyEncoder struct {
	w           io.Writer
	tbl         *sluice.Table
	buf         []byte
	rows, bytes int64
}

// emit encodes a batch; the batch is not kept (the producer may reuse it).
func (e *copyEncoder) emit(batch []sluice.Row) error {
	for _, r := range batch {
		if len(r) != len(e.tbl.Columns) {
			return fmt.Errorf("row %d of the chunk has %d values, the table %d columns", e.rows+1, len(r), len(e.tbl.Columns))
		}
		for i, v := range r {
			if i > 0 {
				e.buf = append(e.buf, '\t')
			}
			switch {
			case v.Unchanged:
				return fmt.Errorf("row %d of the chunk, column %s: the value is missing (unchanged), but a copy must write whole rows",
					e.rows+1, e.tbl.Columns[i].Name)
			case v.Null:
				e.buf = append(e.buf, `\N`...)
			default:
				e.buf = appendCopyText(e.buf, v.Text)
				e.bytes += int64(len(v.Text))
			}
		}
		e.buf = append(e.buf, '\n')
		e.rows++
		if len(e.buf) >= copyFlushSize {
			if err := e.flush(); err != nil {
				return err
			}
		}
	}
	return nil
}

func (e *copyEncoder) flush() error {
	if len(e.buf) == 0 {
		return nil
	}
	_, err := e.w.Write(e.buf)
	e.buf = e.buf[:0]
	return err
}

// appendCopyText appends s escaped for COPY's text format: the backslash,
// and the tab, newline and carriage return that would end a field or a
// row. Every other byte is data (the connection's client_encoding is
// UTF8), and an escaped backslash keeps a value like `\N` or `\.` from
// meaning NULL or the end of the data.
func appendCopyText(b []byte, s string) []byte {
	if !strings.ContainsAny(s, "\\\t\n\r") {
		return append(b, s...)
	}
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '\\':
			b = append(b, '\\', '\\')
		case '\t':
			b = append(b, '\\', 't')
		case '\n':
			b = append(b, '\\', 'n')
		case '\r':
			b = append(b, '\\', 'r')
		default:
			b = append(b, c)
		}
	}
	return b
}

// ResetTable deletes every row of the target table and marks its chunks not
// done, in one transaction and one round trip. DELETE rather than TRUNCATE:
// TRUNCATE refuses a table other tables reference by foreign key. Under
// session_replication_role = replica (where the target runs its batches so)
// no foreign-key action fires, so ON DELETE CASCADE does not empty the
// child tables' chunks behind the copy's back.
func (t *Target) ResetTable(ctx context.Context, stream string, tbl *sluice.Table) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if err := t.ensureConn(ctx); err != nil {
		return err
	}
	if err := t.deleteFiresActions(ctx, tbl.Name, "emptying the table to copy it again"); err != nil {
		return &sluice.TableError{Table: tbl.Name, Err: err}
	}
	b := &pgx.Batch{}
	for _, s := range t.begin {
		b.Queue(s)
	}
	if t.copyFenced(stream) {
		b.Queue(buildFenceCheck(t.cfg.Schema), stream, t.gen)
	}
	b.Queue("DELETE FROM " + tableIdent(tbl.Name))
	b.Queue("UPDATE "+copyChunkTable(t.cfg.Schema)+" SET done = false WHERE stream = $1 AND table_name = $2", stream, tbl.Name.String())
	if err := t.execTx(ctx, b); err != nil {
		if f := fenced(err); f != nil {
			return f
		}
		return &sluice.TableError{Table: tbl.Name, Err: fmt.Errorf("reset target table %s for the copy of stream %q on PostgreSQL at %s: %w",
			tbl.Name, stream, t.addr, err)}
	}
	return nil
}

// deleteFiresActions refuses a delete of rows the copy writes again (what,
// a replaced chunk's range or a reset table) where it would fire a
// foreign key's ON DELETE action: without session_replication_role =
// replica (the user may not set it) a CASCADE or SET NULL would change
// rows of the referencing table that sit in chunks a resume kept, and
// nothing would write them again. The check is one catalog query, made
// only where the copy cannot turn the actions off.
func (t *Target) deleteFiresActions(ctx context.Context, name sluice.TableName, what string) error {
	if t.replicaRole {
		return nil
	}
	var con, child, action string
	err := t.conn.QueryRow(ctx, `SELECT c.conname, c.conrelid::regclass::text,
		CASE c.confdeltype WHEN 'c' THEN 'ON DELETE CASCADE' WHEN 'n' THEN 'ON DELETE SET NULL' ELSE 'ON DELETE SET DEFAULT' END
		FROM pg_constraint c WHERE c.contype = 'f' AND c.confrelid = $1::regclass AND c.confdeltype IN ('c', 'n', 'd')
		ORDER BY c.conname LIMIT 1`, tableIdent(name)).Scan(&con, &child, &action)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read the foreign keys that reference target table %s: %w", name, err)
	}
	return fmt.Errorf("resume the copy of %s on target PostgreSQL at %s: %s, which would fire %s of foreign key %s on table %s "+
		"(the copy runs without session_replication_role = replica: the target user may not set it) and change its rows in chunks the resume keeps, which nothing would write again; "+
		"let the user set it (GRANT SET ON PARAMETER session_replication_role TO the user, PostgreSQL 15+, or make it a superuser) and start again, "+
		"or empty the target tables and delete the stream's rows from %s.copy_plan and %s.copy_chunk to copy anew",
		name, t.addr, what, action, con, child, t.cfg.Schema, t.cfg.Schema)
}

// Digest computes the digest of a range of the target table over the
// source's columns, in one transaction under keyrange.PGSetLocal and one
// round trip.
func (t *Target) Digest(ctx context.Context, tbl *sluice.Table, r tablecopy.Range) (tablecopy.Digest, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	var d tablecopy.Digest
	err := func() error {
		keys, err := copyKeyColumns(tbl, r)
		if err != nil {
			return err
		}
		return t.reading(ctx, func() error {
			b := &pgx.Batch{}
			b.Queue("BEGIN")
			for _, s := range keyrange.PGSetLocal() {
				b.Queue(s)
			}
			var n string
			b.Queue(keyrange.PGDigest(tableIdent(tbl.Name), copyColumns(tbl), keyrange.PG(keys, r))).QueryRow(func(row pgx.Row) error {
				return row.Scan(&n, &d.Sum)
			})
			if err := t.execTx(ctx, b); err != nil {
				return err
			}
			var err error
			d.Rows, err = strconv.ParseInt(n, 10, 64)
			return err
		})
	}()
	if err != nil {
		return tablecopy.Digest{}, &sluice.TableError{Table: tbl.Name, Err: fmt.Errorf("digest of %s %s on target PostgreSQL at %s: %w", tbl.Name, r, t.addr, err)}
	}
	return d, nil
}

// FinishCopy marks the stream's plan handed off at pos.
func (t *Target) FinishCopy(ctx context.Context, stream string, pos sluice.Position) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if err := t.ensureConn(ctx); err != nil {
		return err
	}
	tag, err := t.conn.Exec(ctx, "UPDATE "+copyPlanTable(t.cfg.Schema)+" SET handed_off_at = now(), handoff_position = $2 WHERE stream = $1",
		stream, pos.String())
	if err == nil && tag.RowsAffected() == 0 {
		err = errors.New("the stream has no copy plan (WritePlan was not called)")
	}
	if err != nil {
		return fmt.Errorf("mark the copy of stream %q handed off at %s in %s.copy_plan on target PostgreSQL at %s: %w",
			stream, pos, t.cfg.Schema, t.addr, err)
	}
	return nil
}
