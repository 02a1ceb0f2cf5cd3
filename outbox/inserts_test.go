package outbox_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// Enqueue counts the rows it inserts (migration 0020), so it must stay the
// only code that inserts outbox rows: no other source file of the module
// holds an insert into event_queue.
func TestOnlyEnqueueInsertsOutboxRows(t *testing.T) {
	t.Parallel()
	insert := regexp.MustCompile(`(?i)INSERT\s+INTO\s+"?event_queue"?[\s(]`)
	var found []string
	err := filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); name == "testdata" || name == "node_modules" || (strings.HasPrefix(name, ".") && name != "..") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if insert.Match(b) && filepath.ToSlash(path) != "../outbox/event.go" {
			found = append(found, path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(found) > 0 {
		t.Fatalf("outbox rows inserted outside outbox.Enqueue, uncounted: %v", found)
	}
	// The check finds what it looks for.
	b, err := os.ReadFile("event.go")
	if err != nil || !insert.Match(b) {
		t.Fatalf("no insert into event_queue found in event.go (%v): the check is blind", err)
	}
}
