package migrations_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/courier-ap/courier/migrations"
	"github.com/courier-ap/courier/sqlite"
)

const (
	envRaceDB    = "MIGRATIONS_RACE_DB"
	envRaceStart = "MIGRATIONS_RACE_START"
	raceRounds   = 20
)

var appliedRE = regexp.MustCompile(`(?m)^applied=(\d+)$`)

// TestMigrationRace starts two real processes (this test binary again) that
// migrate one fresh database at the same instant, like a server and a worker
// started together, 20 times over. Both must succeed, and every migration must
// be applied exactly once.
func TestMigrationRace(t *testing.T) {
	if testing.Short() {
		t.Skip("subprocess race skipped in -short mode")
	}
	t.Parallel()
	want, err := migrations.All()
	if err != nil {
		t.Fatal(err)
	}
	for round := range raceRounds {
		path := filepath.Join(t.TempDir(), "courier.db")
		// Both processes wait for the same instant, after their start-up.
		at := time.Now().Add(150 * time.Millisecond).UnixNano()
		cmds := make([]*exec.Cmd, 2)
		outs := make([]*limitedBuffer, 2)
		for i := range cmds {
			cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProcess$", "-test.count=1")
			cmd.Env = append(os.Environ(), quickRaceExit(), envRaceDB+"="+path, envRaceStart+"="+strconv.FormatInt(at, 10))
			outs[i] = &limitedBuffer{max: 8 << 10}
			cmd.Stdout, cmd.Stderr = outs[i], outs[i]
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			cmds[i] = cmd
		}
		total := 0
		for i, cmd := range cmds {
			if err := waitBounded(cmd, 30*time.Second); err != nil {
				t.Fatalf("round %d: process %d: %v\n%s", round, i, err, outs[i].b)
			}
			m := appliedRE.FindSubmatch(outs[i].b)
			if m == nil {
				t.Fatalf("round %d: process %d did not report\n%s", round, i, outs[i].b)
			}
			n, _ := strconv.Atoi(string(m[1]))
			total += n
		}
		// Each migration was applied by exactly one of the two processes.
		if total != len(want) {
			t.Fatalf("round %d: the processes applied %d migrations between them, want %d", round, total, len(want))
		}

		db, err := sqlite.Open(context.Background(), path, sqlite.Options{Synchronous: "NORMAL"})
		if err != nil {
			t.Fatal(err)
		}
		rows, err := db.Read.Query(`SELECT version, COUNT(*) OVER (PARTITION BY version) FROM schema_migrations ORDER BY version`)
		if err != nil {
			db.Close()
			t.Fatal(err)
		}
		var got []int
		for rows.Next() {
			var v, n int
			if err := rows.Scan(&v, &n); err != nil {
				t.Fatal(err)
			}
			if n != 1 {
				t.Fatalf("round %d: version %d recorded %d times", round, v, n)
			}
			got = append(got, v)
		}
		rows.Close()
		var tables int
		if err := db.Read.QueryRow(`SELECT COUNT(*) FROM sqlite_schema WHERE type = 'table'
			AND name IN ('event_queue', 'processed_events')`).Scan(&tables); err != nil {
			t.Fatal(err)
		}
		db.Close()
		if len(got) != len(want) || tables != 2 {
			t.Fatalf("round %d: applied %v, outbox tables %d; want %d versions and 2 tables", round, got, tables, len(want))
		}
		for i, m := range want {
			if got[i] != m.Version {
				t.Fatalf("round %d: applied %v, want the versions of %v", round, got, want)
			}
		}
	}
}

// TestHelperProcess is one migrating process of TestMigrationRace.
func TestHelperProcess(t *testing.T) {
	path := os.Getenv(envRaceDB)
	if path == "" {
		t.Skip("a subprocess of TestMigrationRace")
	}
	at, err := strconv.ParseInt(os.Getenv(envRaceStart), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	db, err := sqlite.Open(ctx, path, sqlite.Options{Synchronous: "NORMAL"})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	time.Sleep(time.Until(time.Unix(0, at)))
	applied, err := migrations.Apply(ctx, db.Write, migrations.Options{})
	if err != nil {
		t.Fatal(err)
	}
	fmt.Printf("\napplied=%d\n", len(applied))
	if _, err := migrations.Current(ctx, db.Write, migrations.Latest()); err != nil {
		t.Fatal(err)
	}
}

func waitBounded(cmd *exec.Cmd, d time.Duration) error {
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		return err
	case <-time.After(d):
		_ = cmd.Process.Kill()
		<-done
		return fmt.Errorf("did not finish within %s", d)
	}
}

// limitedBuffer keeps the first max bytes of a subprocess's output.
type limitedBuffer struct {
	b   []byte
	max int
}

func (l *limitedBuffer) Write(p []byte) (int, error) {
	if room := l.max - len(l.b); room > 0 {
		l.b = append(l.b, p[:min(room, len(p))]...)
	}
	return len(p), nil
}

// quickRaceExit keeps a subprocess built with -race from sleeping a second
// at exit (the race runtime's atexit_sleep_ms), which would dominate the
// test's run time.
func quickRaceExit() string {
	return "GORACE=" + strings.TrimSpace(os.Getenv("GORACE")+" atexit_sleep_ms=0")
}
