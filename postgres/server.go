package postgres

import (
	"errors"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"syscall"
)

// ServerBin finds the directory of PostgreSQL's server binaries (initdb,
// postgres), for the throwaway clusters of the tests and the chaos run:
// PATH first, then Debian's /usr/lib/postgresql/<version>/bin, newest
// version first.
func ServerBin() (string, error) {
	if p, err := exec.LookPath("initdb"); err == nil {
		return filepath.Dir(p), nil
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	version := func(d string) int { v, _ := strconv.Atoi(filepath.Base(filepath.Dir(d))); return v }
	sort.Slice(dirs, func(i, j int) bool { return version(dirs[i]) > version(dirs[j]) })
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "initdb")); err == nil {
			return d, nil
		}
	}
	return "", errors.New("postgres: initdb not found on PATH or under /usr/lib/postgresql/*/bin (Debian: apt-get install postgresql)")
}

// ServerCredential is the user such a cluster's server runs as: nil (this
// process's) unless this process is root, which PostgreSQL refuses; then
// the "postgres" user (Debian's package makes it), or "nobody".
func ServerCredential() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	for _, name := range []string{"postgres", "nobody"} {
		u, err := user.Lookup(name)
		if err != nil {
			continue
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
	}
	return nil, errors.New("postgres: running as root and neither a postgres nor a nobody user exists")
}
