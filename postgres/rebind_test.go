package postgres

import "testing"

func TestRebind(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		`SELECT 1`: `SELECT 1`,
		`SELECT * FROM t WHERE a = ? AND b IN (?, ?)`:  `SELECT * FROM t WHERE a = $1 AND b IN ($2, $3)`,
		`SELECT '?', "a?b", ? -- what?` + "\n" + `, ?`: `SELECT '?', "a?b", $1 -- what?` + "\n" + `, $2`,
		`SELECT 'it''s ?', ?`:                          `SELECT 'it''s ?', $1`,
		`SELECT /* ? */ ?`:                             `SELECT /* ? */ $1`,
		`DO $$ BEGIN PERFORM '?'; END $$; SELECT ?`:    `DO $$ BEGIN PERFORM '?'; END $$; SELECT $1`,
		`SELECT $tag$ ? $tag$, ?`:                      `SELECT $tag$ ? $tag$, $1`,
		`SELECT $1, ?`:                                 `SELECT $1, $1`, // mixing is the caller's error; ? is numbered on its own
		`UPDATE t SET a = ? WHERE id = ? RETURNING id`: `UPDATE t SET a = $1 WHERE id = $2 RETURNING id`,
		`SELECT '?`: `SELECT '?`, // unterminated quote: left as it is
	} {
		if got := Rebind(in); got != want {
			t.Errorf("Rebind(%q) = %q, want %q", in, got, want)
		}
	}
}
