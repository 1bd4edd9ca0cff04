package cutover

import (
	"context"
	"fmt"
	"net/url"
	"strconv"
	"strings"

	"github.com/sluice-cdc/sluice"
	"github.com/sluice-cdc/sluice/connstr"
	"github.com/sluice-cdc/sluice/verify"
)

// Forward is the stream a cutover switches away from, as its config file
// holds it.
type Forward struct {
	ID                                     string
	Source, Target                         string
	SourcePasswordFile, TargetPasswordFile string
	Tables                                 []sluice.TableName
}

// ReversePlan is the stream back: from the forward stream's target (the
// application's database after the cutover) to its source, over the same
// tables, so that the old database keeps every write the application
// makes on the new one and a switch back loses nothing.
type ReversePlan struct {
	ID string
	// Forward is the forward stream's id.
	Forward string
	// Source and Target are its endpoints, passwords included (to start
	// it); the config block masks them.
	Source, Target                         string
	SourcePasswordFile, TargetPasswordFile string
	// Tables are the tables as the new source names them.
	Tables []sluice.TableName
	// ReadWrite says Target carries default_transaction_read_only=off, so
	// that the stream may write a PostgreSQL source that --source-read-only
	// left read-only.
	ReadWrite bool
}

// PlanReverse derives the reverse of a forward stream. It refuses what
// the reverse could not write back faithfully: sluice's own tables, and
// tables whose names the two directions do not map onto each other
// (across engines a table is written without its schema, so a PostgreSQL
// table outside public would come back elsewhere).
func PlanReverse(f Forward, id string, sourceReadOnly bool) (ReversePlan, error) {
	if id == "" {
		id = f.ID + "-reverse"
	}
	if id == f.ID {
		return ReversePlan{}, fmt.Errorf("--reverse-stream-id %s is the forward stream's id: the reverse stream needs its own (its checkpoint, slot and status)", id)
	}
	from, err := dialectOf(f.Source)
	if err != nil {
		return ReversePlan{}, fmt.Errorf("--source: %w", err)
	}
	to, err := dialectOf(f.Target)
	if err != nil {
		return ReversePlan{}, fmt.Errorf("--target: %w", err)
	}
	p := ReversePlan{ID: id, Forward: f.ID, Source: f.Target, Target: f.Source, SourcePasswordFile: f.TargetPasswordFile, TargetPasswordFile: f.SourcePasswordFile}
	for _, t := range f.Tables {
		if t.Schema == "sluice" || strings.HasPrefix(t.Name, "sluice_") {
			return ReversePlan{}, fmt.Errorf("table %s is sluice's own: a stream must not carry sluice's tables (checkpoints, fences, changelogs) back; drop it from the tables", t)
		}
		there := verify.TargetName(t, from, to)
		back := verify.TargetName(there, to, from)
		if canonical(back, from) != canonical(t, from) {
			return ReversePlan{}, fmt.Errorf("table %s is written as %s on the target, whose reverse stream would write it back as %s: across engines a table keeps only its name, so a PostgreSQL table must be in schema public for the way back", t, there, canonical(back, from))
		}
		p.Tables = append(p.Tables, there)
	}
	if sourceReadOnly && from == verify.PostgreSQL {
		// The old source's new sessions start read-only now: the
		// reverse stream's sessions turn that off for themselves.
		if p.Target, err = withReadWrite(p.Target); err != nil {
			return ReversePlan{}, err
		}
		p.ReadWrite = true
	}
	return p, nil
}

// canonical names a table as a reader of dialect d resolves it: a
// PostgreSQL table without a schema is in public.
func canonical(t sluice.TableName, d verify.Dialect) sluice.TableName {
	if d == verify.PostgreSQL && t.Schema == "" {
		t.Schema = "public"
	}
	return t
}

func dialectOf(raw string) (verify.Dialect, error) {
	f, err := connstr.FormOf(raw)
	if err != nil {
		return 0, err
	}
	if f.Engine() == "postgres" {
		return verify.PostgreSQL, nil
	}
	return verify.MySQL, nil
}

// withReadWrite adds default_transaction_read_only=off to a PostgreSQL
// connection string: a setting sent at connection start, which overrides
// the database's default.
func withReadWrite(raw string) (string, error) {
	f, err := connstr.FormOf(raw)
	if err != nil {
		return "", err
	}
	if !strings.Contains(raw, "://") || f.Engine() != "postgres" {
		return raw + " default_transaction_read_only=off", nil
	}
	u, err := url.Parse(raw)
	if err != nil {
		return "", fmt.Errorf("the old source's connection string does not parse as a URL: %s", connstr.Mask(raw))
	}
	q := u.Query()
	q.Set("default_transaction_read_only", "off")
	u.RawQuery = q.Encode()
	return u.String(), nil
}

// Config is the plan's [[stream]] block for the config file, passwords
// masked.
func (p ReversePlan) Config() string {
	var b strings.Builder
	fmt.Fprintf(&b, "# run it only once stream %s is stopped: both at once would send each write back and forth\n", p.Forward)
	b.WriteString("[[stream]]\n")
	kv := func(k, v string) {
		if v != "" {
			fmt.Fprintf(&b, "%s = %s\n", k, strconv.Quote(v))
		}
	}
	kv("stream_id", p.ID)
	kv("source", connstr.Mask(p.Source))
	kv("source_password_file", p.SourcePasswordFile)
	kv("target", connstr.Mask(p.Target))
	kv("target_password_file", p.TargetPasswordFile)
	names := make([]string, len(p.Tables))
	for i, t := range p.Tables {
		names[i] = strconv.Quote(t.String())
	}
	fmt.Fprintf(&b, "tables = [%s]\n", strings.Join(names, ", "))
	if connstr.Mask(p.Source) != p.Source || connstr.Mask(p.Target) != p.Target {
		b.WriteString("# passwords are masked above: put them back, or use source_password_file / target_password_file\n")
	}
	return b.String()
}

// reverseWarnings names what on the old source would act on the reverse
// stream's writes: triggers (the application's, which ran once already
// when it wrote the new database; a trigger-mode forward stream's capture
// triggers, whose changelog nobody reads any more).
func (c *cutover) reverseWarnings(ctx context.Context) ([]string, error) {
	var out []string
	for _, t := range c.cfg.Tables {
		trg, err := c.src.triggers(ctx, t)
		if err != nil {
			return nil, err
		}
		if len(trg) == 0 {
			continue
		}
		out = append(out, fmt.Sprintf("table %s on the old source has triggers that may fire on the reverse stream's writes: %s (PostgreSQL: ordinary triggers do not fire when sluice's user may set session_replication_role; "+
			"sluice_* capture triggers of a trigger-mode forward stream: remove them with sluice source uninstall --stream-id %s before starting the reverse stream)",
			t, strings.Join(trg, ", "), c.cfg.Stream))
	}
	return out, nil
}
