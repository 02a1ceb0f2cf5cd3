package activitypub

import (
	"bytes"
	"crypto/rand"
	"crypto/sha512"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"testing"
)

func sha512Sum(b []byte) []byte {
	s := sha512.Sum512(b)
	return s[:]
}

func mustURL(t testing.TB, s string) *url.URL {
	t.Helper()
	u, err := url.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

func readAllLimit(r io.Reader, n int64) ([]byte, error) {
	return io.ReadAll(io.LimitReader(r, n))
}

func readCloser(b []byte) io.ReadCloser { return io.NopCloser(bytes.NewReader(b)) }

func readTestdata(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func randReader() io.Reader { return rand.Reader }
