//go:build !unix

package main

import "io/fs"

// restrictUmask does nothing where there is no umask; privateDataDir still makes the
// data directory private.
func restrictUmask() {}

// foreignOwner cannot tell an owner here.
func foreignOwner(fs.FileInfo) (int, bool) { return 0, false }
