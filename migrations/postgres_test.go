package migrations_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/courier-ap/courier/migrations"
	"github.com/courier-ap/courier/postgres"
	"github.com/courier-ap/courier/postgres/pgtest"
	"github.com/courier-ap/courier/sqlite"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

const envRacePG = "MIGRATIONS_RACE_PG"

// TestDialectsInStep requires every version to exist in both dialects under
// the same name: version N is one schema on either store.
func TestDialectsInStep(t *testing.T) {
	t.Parallel()
	lite, err := migrations.AllOf(migrations.SQLite)
	if err != nil {
		t.Fatal(err)
	}
	pg, err := migrations.AllOf(migrations.Postgres)
	if err != nil {
		t.Fatal(err)
	}
	name := func(ms []migrations.Migration) []string {
		var out []string
		for _, m := range ms {
			out = append(out, fmt.Sprintf("%04d_%s", m.Version, m.Name))
		}
		return out
	}
	if a, b := strings.Join(name(lite), " "), strings.Join(name(pg), " "); a != b {
		t.Fatalf("migrations out of step:\n sqlite:   %s\n postgres: %s", a, b)
	}
}

// TestPostgresSchemaMatchesSQLite migrates a real SQLite file and a real
// PostgreSQL database and requires the same tables with the same columns in
// the same order, so code written against one layout reads the other.
func TestPostgresSchemaMatchesSQLite(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pg := openPG(t)
	if _, err := migrations.Apply(ctx, pg, migrations.Options{Dialect: migrations.Postgres}); err != nil {
		t.Fatal(err)
	}
	lite, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "courier.db"), sqlite.Options{Synchronous: "NORMAL"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lite.Close() })
	if _, err := migrations.Apply(ctx, lite.Write, migrations.Options{}); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{}
	rows, err := lite.Read.Query(`SELECT m.name, group_concat(p.name, ',') FROM sqlite_schema m, pragma_table_info(m.name) p
		WHERE m.type IN ('table', 'view') AND m.name NOT LIKE 'sqlite_%' GROUP BY m.name`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var table, cols string
		if err := rows.Scan(&table, &cols); err != nil {
			t.Fatal(err)
		}
		want[table] = cols
	}
	rows.Close()
	got := map[string]string{}
	rows, err = pg.Query(`SELECT table_name, string_agg(column_name, ',' ORDER BY ordinal_position)
		FROM information_schema.columns WHERE table_schema = 'public' GROUP BY table_name`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var table, cols string
		if err := rows.Scan(&table, &cols); err != nil {
			t.Fatal(err)
		}
		got[table] = cols
	}
	rows.Close()
	if len(want) < 10 {
		t.Fatalf("sqlite has only %d tables: %v", len(want), want)
	}
	var tables []string
	for k := range want {
		tables = append(tables, k)
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			tables = append(tables, k)
		}
	}
	sort.Strings(tables)
	for _, table := range tables {
		if want[table] != got[table] {
			t.Errorf("table %s:\n sqlite:   %s\n postgres: %s", table, want[table], got[table])
		}
	}
}

// TestPostgresTooNewRefused is TestTooNewRefused on PostgreSQL.
func TestPostgresTooNewRefused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := openPG(t)
	opts := migrations.Options{Dialect: migrations.Postgres}
	if _, err := migrations.Apply(ctx, db, opts); err != nil {
		t.Fatal(err)
	}
	if applied, err := migrations.Apply(ctx, db, opts); err != nil || len(applied) != 0 {
		t.Fatalf("second Apply: applied %v, err %v; want nothing and no error", applied, err)
	}
	if _, err := db.Exec(`INSERT INTO schema_migrations (version, name, applied_at) VALUES ($1, 'future', 0)`, migrations.Latest()+1); err != nil {
		t.Fatal(err)
	}
	applied, err := migrations.Apply(ctx, db, opts)
	if !errors.Is(err, migrations.ErrTooNew) || len(applied) != 0 {
		t.Fatalf("applied %v, err %v; want nothing applied and ErrTooNew", applied, err)
	}
	if _, err := migrations.Current(ctx, db, migrations.Latest()); !errors.Is(err, migrations.ErrTooNew) {
		t.Fatalf("Current: %v, want ErrTooNew", err)
	}
}

// TestPostgresMigrationRace is TestMigrationRace on PostgreSQL: two real
// processes migrate one fresh database at the same instant, 10 times over;
// both succeed and every version is applied once.
func TestPostgresMigrationRace(t *testing.T) {
	if testing.Short() {
		t.Skip("subprocess race skipped in -short mode")
	}
	t.Parallel()
	want, err := migrations.AllOf(migrations.Postgres)
	if err != nil {
		t.Fatal(err)
	}
	for round := range 10 {
		dsn := pgtest.DSN(t)
		at := time.Now().Add(300 * time.Millisecond).UnixNano()
		cmds := make([]*exec.Cmd, 2)
		outs := make([]*limitedBuffer, 2)
		for i := range cmds {
			cmd := exec.Command(os.Args[0], "-test.run=^TestPostgresHelperProcess$", "-test.count=1")
			cmd.Env = append(os.Environ(), quickRaceExit(), envRacePG+"="+dsn, envRaceStart+"="+strconv.FormatInt(at, 10))
			outs[i] = &limitedBuffer{max: 8 << 10}
			cmd.Stdout, cmd.Stderr = outs[i], outs[i]
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			cmds[i] = cmd
		}
		total := 0
		for i, cmd := range cmds {
			if err := waitBounded(cmd, 60*time.Second); err != nil {
				t.Fatalf("round %d: process %d: %v\n%s", round, i, err, outs[i].b)
			}
			m := appliedRE.FindSubmatch(outs[i].b)
			if m == nil {
				t.Fatalf("round %d: process %d did not report\n%s", round, i, outs[i].b)
			}
			n, _ := strconv.Atoi(string(m[1]))
			total += n
		}
		if total != len(want) {
			t.Fatalf("round %d: the processes applied %d migrations between them, want %d", round, total, len(want))
		}
		db, err := postgres.Open(context.Background(), dsn, postgres.Options{MaxConns: 2})
		if err != nil {
			t.Fatal(err)
		}
		var n, distinct int
		err = db.Write.QueryRow(`SELECT COUNT(*), COUNT(DISTINCT version) FROM schema_migrations`).Scan(&n, &distinct)
		db.Close()
		if err != nil || n != len(want) || distinct != len(want) {
			t.Fatalf("round %d: %d rows, %d versions, err %v; want %d of each", round, n, distinct, err, len(want))
		}
	}
}

// TestPostgresHelperProcess is one migrating process of
// TestPostgresMigrationRace.
func TestPostgresHelperProcess(t *testing.T) {
	dsn := os.Getenv(envRacePG)
	if dsn == "" {
		t.Skip("a subprocess of TestPostgresMigrationRace")
	}
	at, err := strconv.ParseInt(os.Getenv(envRaceStart), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	db, err := postgres.Open(ctx, dsn, postgres.Options{MaxConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	time.Sleep(time.Until(time.Unix(0, at)))
	applied, err := migrations.Apply(ctx, db.Write, migrations.Options{Dialect: migrations.Postgres})
	if err != nil {
		t.Fatal(err)
	}
	fmt.Printf("\napplied=%d\n", len(applied))
}

func openPG(t *testing.T) *sql.DB {
	t.Helper()
	db, err := postgres.Open(context.Background(), pgtest.DSN(t), postgres.Options{MaxConns: 4})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db.Write
}
