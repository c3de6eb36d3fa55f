package pgcluster

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

// A cluster takes a file of its own into its configuration directory and serves
// connections; Drop removes the cluster and that directory, the file included
// (pg_dropcluster alone leaves a directory holding files it did not make).
func TestCreateAndDropLeaveNothing(t *testing.T) {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	c, err := Create(context.Background(), "choreo_pgcluster_"+hex.EncodeToString(b), WithConfigFile("note.txt", []byte("made by the test\n")))
	if err != nil {
		t.Fatalf("a cluster of the test's own (needs root or the postgres user): %v", err)
	}
	dropped := false
	defer func() {
		if !dropped {
			c.Drop()
		}
	}()
	if _, err := os.Stat(filepath.Join(c.ConfigDir(), "note.txt")); err != nil {
		t.Fatalf("the file given to WithConfigFile: %v", err)
	}
	if err := WaitTCP(context.Background(), c.Addr()); err != nil {
		t.Fatal(err)
	}
	c.Drop()
	dropped = true
	if _, err := os.Stat(c.ConfigDir()); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("after Drop, %s: %v; want it gone", c.ConfigDir(), err)
	}
}
