package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/courier-ap/courier/sqldb/storetest"
	"github.com/courier-ap/courier/store/notetest"
)

// Every command and subcommand answers -h and --help on stdout with exit 0,
// nothing on stderr, and opens no database.
func TestHelpExitsZeroEverywhere(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"--help"}, {"-h"}, {"help"},
		{"serve", "-h"}, {"worker", "--help"}, {"migrate", "-h"},
		{"actor", "-h"}, {"actor", "--help"}, {"actor", "create", "-h"}, {"actor", "create", "alice", "--help"}, {"actor", "delete", "-h"}, {"actor", "followers", "-h"}, {"actor", "followers", "approve", "--help"},
		{"admin", "-h"}, {"admin", "--help"},
		{"chaos", "-h"}, {"chaos", "--help"},
		{"store", "-h"}, {"store", "copy", "--help"},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			t.Parallel()
			code, out, errb := runCommand(args...)
			if code != 0 || errb != "" || !strings.Contains(out, "usage") {
				t.Fatalf("exit %d, stdout %q, stderr %q: want exit 0 and the usage on stdout", code, out, errb)
			}
		})
	}
	t.Cleanup(func() {
		// The default database, had any help opened it, would be here.
		if _, err := os.Stat(defaultConfig().DB); err == nil {
			t.Errorf("a help left %s in the package's directory", defaultConfig().DB)
		}
	})
}

// courier --help names every command and subcommand.
func TestHelpListsEveryCommand(t *testing.T) {
	t.Parallel()
	code, out, _ := runCommand("--help")
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	for _, c := range []string{"serve", "worker", "migrate", "actor", "create NAME", "delete NAME", "followers NAME", "admin", "chaos", "store", "copy", "version"} {
		if !strings.Contains(out, c) {
			t.Errorf("courier --help omits %q:\n%s", c, out)
		}
	}
}

// actor create and delete refuse a base URL other than the one the
// database's ids were made with (exit 2, one line naming both), since the
// id they would print is not the one the server serves; with the server's
// base URL, or none (the one the server recorded), they print the id it
// serves, also before the database's first object.
func TestActorCommandsTakeTheServersBaseURL(t *testing.T) {
	t.Parallel()
	cfg := defaultConfig()
	cfg.DB = storetest.Location(t)
	cfg.Synchronous = "NORMAL"
	cfg.Listen, cfg.OpsListen = "127.0.0.1:0", "127.0.0.1:0"
	cfg.BaseURL = "https://social.example"
	a := runApp(t, func(c *Config) { *c = cfg })
	// No --base-url, before any object: the one the server recorded.
	code, out, errb := runCommand("actor", "create", "--db", cfg.DB, "--json", "alice")
	if code != 0 {
		t.Fatalf("actor create: exit %d, stderr %q", code, errb)
	}
	var alice struct{ ID, Token string }
	if err := json.Unmarshal([]byte(out), &alice); err != nil || alice.ID != "https://social.example/users/alice" {
		t.Fatalf("actor create printed %q (%v)", out, err)
	}
	// Her first note records the instance's ids in the database.
	ctx := context.Background()
	act, err := a.store.ActorByName(ctx, "alice")
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := notetest.Create(ctx, a.store, act, notetest.Input{Content: "hello", To: []string{act.URI + "/followers"}}); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"actor", "create", "--db", cfg.DB, "--base-url", "http://localhost:8080", "bob"},
		{"actor", "create", "--db", cfg.DB, "--base-url", "https://other.example", "bob"},
		{"actor", "delete", "--db", cfg.DB, "--base-url", "https://other.example", "alice"},
		{"actor", "followers", "--db", cfg.DB, "--base-url=https://other.example", "alice"},
	} {
		code, _, errb := runCommand(args...)
		if code != 2 || strings.Count(errb, "\n") != 1 || !strings.Contains(errb, "https://social.example") {
			t.Errorf("%v: exit %d, stderr %q; want exit 2 and one line naming the database's base URL", args, code, errb)
		}
	}
	code, out, errb = runCommand("actor", "create", "--db", cfg.DB, "--base-url", cfg.BaseURL+"/", "bob")
	if code != 0 || !strings.Contains(out, "id: https://social.example/users/bob\n") {
		t.Fatalf("actor create with the server's base URL: exit %d, stdout %q, stderr %q", code, out, errb)
	}
	code, out, errb = runCommand("actor", "create", "--db", cfg.DB, "carol")
	if code != 0 || !strings.Contains(out, "id: https://social.example/users/carol\n") {
		t.Fatalf("actor create without a base URL: exit %d, stdout %q, stderr %q", code, out, errb)
	}
}

// docs/settings.md lists every flag of serve, worker and migrate with its
// environment variable.
func TestSettingsPageListsEveryFlag(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("../../docs/settings.md")
	if err != nil {
		t.Fatal(err)
	}
	page := string(raw)
	for _, cmd := range []string{"serve", "worker", "migrate"} {
		cfg := defaultConfigFor(cmd)
		for _, s := range settingsFor(&cfg, cmd) {
			if !strings.Contains(page, "| `--"+s.flag+"` |") || !strings.Contains(page, "`"+s.env+"`") {
				t.Errorf("docs/settings.md lacks --%s (%s) of %s", s.flag, s.env, cmd)
			}
		}
	}
}

// TestCommandErrorsAndHelp: a bad argument is one line "courier: ..." and
// exit 2, naming what is wrong; each command's -h is its own and lists only
// the flags it reads.
func TestCommandErrorsAndHelp(t *testing.T) {
	t.Parallel()
	db := storetest.Location(t)
	never := filepath.Join(t.TempDir(), "never.db")
	for _, tc := range []struct {
		args  []string
		wants []string
		not   string
	}{
		{[]string{"actor", "create", "x", "--db", db, "--bogus"}, []string{"bogus"}, ""},
		{[]string{"actor", "create", "--db", db}, []string{"NAME"}, ""},
		{[]string{"actor", "create", "x", "--db", never, "--bogus"}, []string{"bogus"}, ""},
	} {
		code, out, errb := runCommand(tc.args...)
		if code != 2 || out != "" || strings.Count(errb, "\n") != 1 || !strings.HasPrefix(errb, "courier: ") ||
			(tc.not != "" && strings.Contains(errb, tc.not)) {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want exit 2 and one line", tc.args, code, out, errb)
			continue
		}
		for _, w := range tc.wants {
			if !strings.Contains(errb, w) {
				t.Errorf("%v: stderr %q does not name %q", tc.args, errb, w)
			}
		}
	}
	// The admin command's usage errors are its own (a line and a pointer
	// to its help); "list" is named as no subcommand, not as an argument
	// a command without arguments was given.
	if code, _, errb := runCommand("admin", "webhooks", "list"); code != 2 || !strings.Contains(errb, `unknown subcommand "list"`) ||
		!strings.Contains(errb, "remove") || strings.Contains(errb, "takes no arguments") {
		t.Errorf("admin webhooks list: exit %d, stderr %q", code, errb)
	}
	if _, err := os.Stat(never); err == nil {
		t.Error("a refused actor create made a database")
	}
	code, out, _ := runCommand("actor", "create", "-h")
	if code != 0 || !strings.Contains(out, "--display-name") || !strings.Contains(out, "NAME is 1 to 30") ||
		strings.Contains(out, "actor delete") {
		t.Errorf("actor create -h: exit %d:\n%s", code, out)
	}
	for _, tc := range []struct {
		cmd       string
		has, lack []string
	}{
		{"worker", []string{"--concurrency", "--db", "--ops-listen", "--base-url"},
			[]string{"--listen ", "--admin-token", "--authorized-fetch", "--streams-max", "--inbox-host-requests", "--worker "}},
		{"migrate", []string{"--db", "--synchronous"}, []string{"--base-url", "--listen ", "--concurrency", "--bus"}},
		{"serve", []string{"--listen ", "--admin-token", "--concurrency"}, nil},
	} {
		code, out, _ := runCommand(tc.cmd, "-h")
		if code != 0 {
			t.Errorf("%s -h: exit %d", tc.cmd, code)
		}
		for _, f := range tc.has {
			if !strings.Contains(out, f) {
				t.Errorf("%s -h omits %s", tc.cmd, f)
			}
		}
		for _, f := range tc.lack {
			if strings.Contains(out, f) {
				t.Errorf("%s -h lists %s, which it ignores", tc.cmd, f)
			}
		}
	}
}
