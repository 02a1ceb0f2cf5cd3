package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/courier-ap/courier/postgres"
	"github.com/courier-ap/courier/storecopy"
)

const storeUsage = `usage: courier store copy --from FILE --to postgres://USER:PASSWORD@HOST:5432/DB [--batch 500]

Copies a stopped instance's whole state from its SQLite file into a
PostgreSQL database: every table (actors and their keys, objects, follows,
the outbox with every status, the ledger, deliveries, host health, ...), in
batches, with a progress bar on stderr. The target is migrated to this
binary's schema version first; the source must be at that version too (run
"courier migrate --db FILE" with this binary before). At the end the row
count and a checksum of every table are compared on both sides.

Stop every courier process on FILE first: the copy refuses a file another
process has open (where Linux's /proc/locks shows it), and holds the file's
write lock until it ends, so a courier still running would see its writes
fail.
An interrupted copy can be run again with the same arguments: it resumes
where it stopped. A target that holds rows of anything else is refused.`

// storeCommand runs `courier store copy`: see storeUsage and package
// storecopy.
func storeCommand(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if wantsHelp(args) {
		fmt.Fprintln(stdout, storeUsage)
		return errHelp
	}
	if len(args) == 0 || args[0] != "copy" {
		return usageError("store: want \"courier store copy --from FILE --to postgres://...\" (courier store -h explains)")
	}
	fs := flag.NewFlagSet("courier store copy", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	from := fs.String("from", "", "the SQLite file of the stopped instance")
	to := fs.String("to", "", "the PostgreSQL database, a postgres:// URL")
	batch := fs.Int("batch", 500, "rows per insert and transaction on the target")
	if err := fs.Parse(args[1:]); err != nil {
		return usageError("store copy: %v", err)
	}
	switch {
	case fs.NArg() > 0:
		return usageError("store copy: unexpected argument %q", fs.Arg(0))
	case *from == "":
		return usageError("store copy: --from is missing: the SQLite file to copy")
	case *to == "":
		return usageError("store copy: --to is missing: the postgres:// URL of the target")
	case !postgres.IsURL(*to):
		return usageError("store copy: --to %q is not a postgres:// URL", postgres.Redact(*to))
	case *batch < 1:
		return usageError("store copy: --batch must be at least 1")
	}
	if _, err := os.Stat(*from); err != nil {
		return usageError("store copy: --from: %v", err)
	}
	bar := &progressBar{w: stderr, tty: isTerminal(stderr)}
	res, err := storecopy.Run(ctx, *from, *to, storecopy.Options{BatchSize: *batch, Progress: bar.report})
	bar.end()
	if err != nil {
		switch {
		case errors.Is(err, postgres.ErrURL):
			return usageError("store copy: %v", err)
		case ctx.Err() != nil:
			return fmt.Errorf("store copy interrupted; run the same command again to resume (%w)", err)
		}
		return err
	}
	var rows, copied int64
	for _, r := range res {
		rows += r.Rows
		copied += r.Copied
	}
	fmt.Fprintf(stdout, "copied %s to %s: %d tables, %d rows (%d written by this run); row counts and checksums match\n",
		*from, postgres.Redact(*to), len(res), rows, copied)
	return nil
}

// isTerminal reports whether w is a terminal (a character device), where
// the progress bar redraws one line; elsewhere it writes plain lines.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// progressBar draws the copy's progress: on a terminal one line per table,
// redrawn after every batch; elsewhere one plain line per finished table
// and, for a table of 10,000 rows or more, one per tenth copied.
type progressBar struct {
	w     io.Writer
	tty   bool
	drawn bool  // a line is drawn and not ended
	tenth int64 // the tenths of the table reported in plain lines
}

func (b *progressBar) report(p storecopy.Progress) {
	if p.Verifying {
		switch {
		case b.tty:
			fmt.Fprintf(b.w, "\r[%2d/%d] verifying %-70s", p.Index, p.Tables, p.Table)
			b.drawn = true
		case p.Index == 1:
			fmt.Fprintln(b.w, "store copy: verifying row counts and checksums")
		}
		return
	}
	line := fmt.Sprintf("[%2d/%d] %-27s %10d / %-10d", p.Index, p.Tables, p.Table, p.Done, p.Total)
	if !b.tty {
		// A line per finished table, and per tenth of a large one.
		tenth := int64(-1)
		if p.Total >= 10_000 {
			tenth = p.Done * 10 / p.Total
		}
		if p.Finished || (tenth > b.tenth && tenth < 10) {
			fmt.Fprintf(b.w, "store copy: %s rows\n", strings.TrimSpace(line))
		}
		b.tenth = tenth
		if p.Finished {
			b.tenth = 0
		}
		return
	}
	const width = 30
	frac := 1.0
	if p.Total > 0 {
		frac = float64(p.Done) / float64(p.Total)
	}
	n := int(frac * width)
	fmt.Fprintf(b.w, "\r%s [%s%s] %3.0f%%", line, strings.Repeat("=", n), strings.Repeat(" ", width-n), frac*100)
	b.drawn = !p.Finished
	if p.Finished {
		fmt.Fprintln(b.w)
	}
}

// end ends a line left drawn by an interrupted table.
func (b *progressBar) end() {
	if b.drawn {
		fmt.Fprintln(b.w)
		b.drawn = false
	}
}
