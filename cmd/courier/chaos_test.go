package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// TestChaosBadFlags: each bad chaos flag exits 2 with one line naming it,
// before anything is started.
func TestChaosBadFlags(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		args []string
		want string
	}{
		{"unknown store", []string{"--store", "mysql"}, `invalid --store "mysql": want sqlite or postgres`},
		{"url without postgres store", []string{"--postgres-url", "postgres://u@127.0.0.1:5432/postgres"}, "--postgres-url needs --store postgres"},
		{"url not postgres", []string{"--store", "postgres", "--postgres-url", "mysql://u@h/db"}, "a postgres:// URL"},
		{"unknown cut", []string{"--store", "postgres", "--cut", "iptables"}, `invalid --cut "iptables": want netns or proxy`},
		{"too many workers", []string{"--store", "postgres", "--workers", "9"}, "--servers and --workers: want 1 to 8"},
		{"negative servers", []string{"--servers", "-1"}, "--servers and --workers: want 1 to 8"},
		{"unknown bus", []string{"--bus", "kafka"}, `invalid --bus "kafka"`},
		{"bad seed", []string{"--seed", "x"}, "invalid --seed"},
		{"no objects", []string{"--converge", "--objects", "0"}, "invalid --objects 0: want 1 to 100000"},
		{"no chaotic hosts", []string{"--converge", "--chaotic-hosts", "0"}, "invalid --chaotic-hosts 0: want 1 to 64"},
		{"fault rate too high", []string{"--converge", "--fault-rate", "0.9"}, "invalid --fault-rate 0.9"},
		{"outage past park-max", []string{"--converge", "--outage-max", "30s", "--park-max", "20s"}, "--outage-max 30s must be shorter than --park-max 20s"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			var stdout, stderr bytes.Buffer
			code := run(context.Background(), append([]string{"chaos"}, c.args...), &stdout, &stderr, func(string) string { return "" })
			if code != 2 {
				t.Fatalf("exit %d, want 2; stderr %q", code, stderr.String())
			}
			lines := strings.Split(strings.TrimRight(stderr.String(), "\n"), "\n")
			if len(lines) != 1 || !strings.HasPrefix(lines[0], "courier: ") || !strings.Contains(lines[0], c.want) {
				t.Fatalf("stderr %q: want one line starting courier: and containing %q", stderr.String(), c.want)
			}
			if stdout.Len() != 0 {
				t.Fatalf("stdout %q: want nothing", stdout.String())
			}
		})
	}
}
