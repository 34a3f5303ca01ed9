// Package sysfile reads the small files of /proc, /sys and the cgroup
// filesystems that levee's CPU and memory monitors sample several times a
// second, through descriptors it keeps open: preads from offset 0 until
// one returns nothing, two for a file of a few lines, where os.ReadFile
// takes six to nine system calls (open, fcntl to and from non-blocking,
// a try at the network poller, fstat, reads to EOF, close). Those files
// are made anew by a read from offset 0 (the kernel's seq_file and
// kernfs), so a read through a kept descriptor sees what a fresh open
// would. Any other file (a test's
// fixture on disk) is read with os.ReadFile every time, so that one
// rewritten or removed reads as it would.
//
// A [Parser] locates the process's cgroup from /proc/self/mountinfo and
// /proc/self/cgroup and parses the cgroup files common to the cpu and
// memory packages, with errors that read and match as each package's own.
package sysfile

import (
	"errors"
	"os"
	"sync"
	"syscall"
)

// Files reads files by name. A nil *Files reads each with os.ReadFile.
// The zero value is ready to use. It is safe for concurrent use. The
// descriptors it keeps are closed by Forget, by Close, or when the Files
// is garbage collected (with their os.File).
type Files struct {
	mu   sync.Mutex
	open map[string]*file
	buf  []byte
}

type file struct {
	f    *os.File
	fd   int
	used bool // read since the last Forget
}

// ReadFile returns the contents of the file name, as os.ReadFile does.
func (fs *Files) ReadFile(name string) ([]byte, error) {
	if fs == nil {
		return os.ReadFile(name)
	}
	fs.mu.Lock()
	defer fs.mu.Unlock()
	e := fs.open[name]
	if e == nil {
		f, err := os.Open(name)
		if err != nil {
			return nil, err
		}
		if !pseudo(f) {
			f.Close()
			return os.ReadFile(name)
		}
		e = &file{f: f, fd: int(f.Fd())}
		if fs.open == nil {
			fs.open = map[string]*file{}
		}
		fs.open[name] = e
	}
	e.used = true
	data, err := fs.pread(e.fd)
	if err != nil {
		// The file went away (a thread that exited, a cgroup removed):
		// open it again next time, or fail then as os.ReadFile would.
		e.f.Close()
		delete(fs.open, name)
		return nil, &os.PathError{Op: "read", Path: name, Err: err}
	}
	return data, nil
}

// pread reads the whole file from offset 0 into a copy: reads at the
// offset reached until one returns nothing (a file of the kernel's
// seq_file returns a page's worth of lines or less per read, whatever
// room the buffer has), two for a file of a few lines.
func (fs *Files) pread(fd int) ([]byte, error) {
	if len(fs.buf) == 0 {
		fs.buf = make([]byte, 4096)
	}
	n := 0
	for {
		if n == len(fs.buf) {
			fs.buf = append(fs.buf, make([]byte, len(fs.buf))...)
		}
		m, err := pread(fd, fs.buf[n:], int64(n))
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil {
			return nil, err
		}
		if m == 0 {
			return append([]byte(nil), fs.buf[:n]...), nil
		}
		n += m
	}
}

// Forget closes the descriptors of the files not read since the last
// Forget: the schedstat files of threads that exited, say.
func (fs *Files) Forget() {
	if fs == nil {
		return
	}
	fs.mu.Lock()
	defer fs.mu.Unlock()
	for name, e := range fs.open {
		if !e.used {
			e.f.Close()
			delete(fs.open, name)
		}
		e.used = false
	}
}

// Close closes every descriptor kept; the Files stays usable.
func (fs *Files) Close() {
	if fs == nil {
		return
	}
	fs.mu.Lock()
	defer fs.mu.Unlock()
	for name, e := range fs.open {
		e.f.Close()
		delete(fs.open, name)
	}
}

// Kept returns how many descriptors fs keeps open.
func (fs *Files) Kept() int {
	if fs == nil {
		return 0
	}
	fs.mu.Lock()
	defer fs.mu.Unlock()
	return len(fs.open)
}
