package benchutil

import (
	"os"
	"path/filepath"
	"testing"
)

// TestAdminAddr: the last "app: started" line of a log names the admin listener.
func TestAdminAddr(t *testing.T) {
	path := filepath.Join(t.TempDir(), "order-1.log")
	log := `{"level":"INFO","msg":"app: started","http_addr":"127.0.0.1:1","admin_addr":"127.0.0.1:2"}
not json
{"level":"INFO","msg":"app: started","http_addr":"127.0.0.1:3","admin_addr":"127.0.0.1:4"}
`
	if err := os.WriteFile(path, []byte(log), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, err := AdminAddr(path); err != nil || got != "127.0.0.1:4" {
		t.Errorf("AdminAddr = %q, %v; want the last start's 127.0.0.1:4", got, err)
	}
	if err := os.WriteFile(path, []byte("nothing\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := AdminAddr(path); err == nil {
		t.Error("AdminAddr of a log without admin_addr: no error")
	}
}
