package storecopy

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// otherOpeners lists the other processes that have the SQLite database at
// path open, as far as Linux shows: in WAL mode every connection holds a
// lock on the database's -shm file for as long as it is open, and
// /proc/locks lists every lock with its process. Reading /proc/locks opens
// nothing of the database's, so it cannot disturb this process's own
// locks (closing any descriptor of a file drops the process's POSIX locks
// on it). A pid of -1 is a lock whose process the kernel does not say.
func otherOpeners(path string) ([]int, error) {
	fi, err := os.Stat(path + "-shm")
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil // nobody has it open in WAL mode
	}
	if err != nil {
		return nil, err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return nil, nil
	}
	dev := uint64(st.Dev)
	major := (dev>>8)&0xfff | (dev>>32)&^uint64(0xfff)
	minor := dev&0xff | (dev>>12)&^uint64(0xff)
	want := fmt.Sprintf("%02x:%02x:%d", major, minor, st.Ino)
	f, err := os.Open("/proc/locks")
	if err != nil {
		return nil, nil // no /proc: nothing to tell
	}
	defer f.Close()
	self := os.Getpid()
	seen := map[int]bool{}
	var pids []int
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) > 1 && fields[1] == "->" {
			fields = append(fields[:1], fields[2:]...)
		}
		if len(fields) < 6 || fields[5] != want {
			continue
		}
		pid, err := strconv.Atoi(fields[4])
		if err != nil || pid == self || seen[pid] {
			continue
		}
		seen[pid] = true
		pids = append(pids, pid)
	}
	return pids, sc.Err()
}
