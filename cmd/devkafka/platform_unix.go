//go:build unix

package main

import (
	"io/fs"
	"os"
	"syscall"
)

// restrictUmask makes the files and directories the process creates readable by its
// user only (0600 and 0700).
func restrictUmask() { syscall.Umask(0o077) }

// foreignOwner returns the owner of fi when it is not the process's user.
func foreignOwner(fi fs.FileInfo) (uid int, foreign bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, false
	}
	return int(st.Uid), int(st.Uid) != os.Getuid()
}
