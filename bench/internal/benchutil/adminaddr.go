package benchutil

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
)

// AdminAddr finds a service instance's admin listener address in its log: the services
// log it at start ("app: started" with admin_addr), and the harnesses give them
// ADMIN_ADDR=127.0.0.1:0. The last start in the log wins.
func AdminAddr(logPath string) (string, error) {
	b, err := os.ReadFile(logPath)
	if err != nil {
		return "", err
	}
	addr := ""
	for line := range strings.SplitSeq(string(b), "\n") {
		if !strings.Contains(line, `"admin_addr"`) {
			continue
		}
		var m struct {
			AdminAddr string `json:"admin_addr"`
		}
		if json.Unmarshal([]byte(line), &m) == nil && m.AdminAddr != "" {
			addr = m.AdminAddr
		}
	}
	if addr == "" {
		return "", fmt.Errorf("no admin_addr in %s", logPath)
	}
	return addr, nil
}
