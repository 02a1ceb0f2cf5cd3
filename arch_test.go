package courier_test

import (
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/courier-ap/courier/"

// allowed is the import direction of ARCHITECTURE.md: for each package of ours, the
// packages of ours its non-test files may import. A package missing from this
// table fails the test, so a new package has to take its place here.
var allowed = map[string][]string{
	"activitypub":               {},
	"migrations":                {"sqldb"},
	"metrics":                   {},
	"sqldb":                     {},
	"sqldb/storetest":           {"sqldb", "sqlite", "postgres", "postgres/pgtest", "migrations"},
	"sqlite":                    {"sqldb"},
	"postgres":                  {"sqldb"},
	"postgres/pgtest":           {"postgres"},
	"outbox":                    {"metrics", "sqldb"},
	"outbox/natsbus":            {"outbox", "metrics"},
	"store":                     {"outbox", "activitypub", "sqldb", "metrics"},
	"store/notetest":            {"store"},
	"delivery":                  {"outbox", "activitypub", "store", "sqldb", "metrics"},
	"httpedge":                  {"store", "limit"},
	"app":                       {"outbox", "activitypub", "store", "sqldb", "metrics", "limit", "httpedge"},
	"app/webhook":               {"app", "delivery", "outbox", "activitypub", "sqldb", "store", "metrics"},
	"examples/webhook-receiver": {},
	"inbox":                     {"outbox", "activitypub", "store", "sqldb", "metrics", "limit", "app", "httpedge"},
	"server":                    {"outbox", "activitypub", "store", "sqldb", "metrics", "limit", "httpedge"},
	"admin":                     {"outbox", "outbox/natsbus", "activitypub", "store", "delivery", "inbox", "sqldb", "metrics", "limit", "app/webhook", "httpedge"},
	"chaos":                     {"outbox", "activitypub", "store", "sqlite", "postgres", "migrations"},
	"interop":                   {},
	"relay":                     {"outbox", "activitypub", "store", "delivery", "sqldb", "metrics"},
	"limit":                     {},
	"storecopy":                 {"sqldb", "sqlite", "postgres", "migrations"},
	"console":                   {"admin"},
	"internal/testnet":          {},
	"docs/plot":                 {},
	"cmd/courier":               nil, // may import everything; nothing imports it
}

func TestImportDirection(t *testing.T) {
	imports := map[string]map[string]bool{}
	fset := token.NewFileSet()
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || d.Name() == "node_modules") && path != "." {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		pkg := filepath.ToSlash(filepath.Dir(path))
		if pkg == "." {
			return nil // the module root holds only this test
		}
		if imports[pkg] == nil {
			imports[pkg] = map[string]bool{}
		}
		for _, imp := range f.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			if rest, ok := strings.CutPrefix(p, module); ok {
				imports[pkg][rest] = true
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	pkgs := make([]string, 0, len(imports))
	for p := range imports {
		pkgs = append(pkgs, p)
	}
	sort.Strings(pkgs)
	for _, pkg := range pkgs {
		allow, known := allowed[pkg]
		if !known {
			t.Errorf("package %s is not in the import-direction table of arch_test.go", pkg)
			continue
		}
		for imp := range imports[pkg] {
			if imp == "cmd/courier" {
				t.Errorf("%s imports cmd/courier: nothing may", pkg)
			}
			if pkg == "cmd/courier" {
				continue
			}
			if !slices.Contains(allow, imp) {
				t.Errorf("%s imports %s, which ARCHITECTURE.md's import direction forbids", pkg, imp)
			}
		}
	}
}

// TestArchitectureTable holds ARCHITECTURE.md's package table to allowed:
// the same packages, each below every package it may import, so that the
// document and the test cannot drift apart.
func TestArchitectureTable(t *testing.T) {
	b, err := os.ReadFile("ARCHITECTURE.md")
	if err != nil {
		t.Fatal(err)
	}
	rows := packageTable(string(b))
	if len(rows) == 0 {
		t.Fatal("ARCHITECTURE.md has no package table under \"## Packages\"")
	}
	pos := map[string]int{}
	for i, p := range rows {
		if _, dup := pos[p]; dup {
			t.Errorf("ARCHITECTURE.md lists %s twice", p)
		}
		pos[p] = i
		if _, ok := allowed[p]; !ok {
			t.Errorf("ARCHITECTURE.md lists %s, which arch_test.go's allowed does not", p)
		}
	}
	for p, imps := range allowed {
		i, ok := pos[p]
		if !ok {
			t.Errorf("arch_test.go's allowed has %s, which ARCHITECTURE.md's package table does not list", p)
			continue
		}
		for _, imp := range imps {
			if j, ok := pos[imp]; ok && j > i {
				t.Errorf("ARCHITECTURE.md lists %s above %s, which it may import: imports go down the list", p, imp)
			}
		}
	}
}

// packageTable returns the packages of the first column of the table under
// the "## Packages" heading, without their trailing slash.
func packageTable(doc string) []string {
	var pkgs []string
	in := false
	for _, line := range strings.Split(doc, "\n") {
		if strings.HasPrefix(line, "## ") {
			if in {
				break
			}
			in = strings.TrimSpace(line) == "## Packages"
			continue
		}
		if !in || !strings.HasPrefix(line, "|") {
			continue
		}
		cells := strings.Split(line, "|")
		if len(cells) < 3 {
			continue
		}
		first := strings.TrimSpace(cells[1])
		name, ok := strings.CutPrefix(first, "`")
		if !ok {
			continue // the header and its rule
		}
		name, _, _ = strings.Cut(name, "`")
		pkgs = append(pkgs, strings.TrimSuffix(name, "/"))
	}
	return pkgs
}
