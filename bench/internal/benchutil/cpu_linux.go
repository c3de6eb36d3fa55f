package benchutil

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// userHz is the unit of /proc/stat (USER_HZ, 100 on Linux).
const userHz = 100

// SampleCPU returns the CPU time consumed so far by the machine (from /proc/stat) and by
// this process (getrusage, user + system). Outside Linux it returns an error wrapping
// errors.ErrUnsupported.
func SampleCPU() (CPUTime, error) {
	f, err := os.Open("/proc/stat")
	if err != nil {
		return CPUTime{}, err
	}
	defer f.Close()
	line, err := bufio.NewReader(f).ReadString('\n')
	if err != nil {
		return CPUTime{}, fmt.Errorf("/proc/stat: %w", err)
	}
	// cpu user nice system idle iowait irq softirq steal ...
	fields := strings.Fields(line)
	if len(fields) < 9 || fields[0] != "cpu" {
		return CPUTime{}, fmt.Errorf("/proc/stat: unexpected first line %q", line)
	}
	var busy int64
	for i, f := range fields[1:9] {
		if i == 3 || i == 4 { // idle, iowait
			continue
		}
		n, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			return CPUTime{}, fmt.Errorf("/proc/stat: %w", err)
		}
		busy += n
	}
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return CPUTime{}, fmt.Errorf("getrusage: %w", err)
	}
	return CPUTime{
		Machine: time.Duration(busy) * time.Second / userHz,
		Process: time.Duration(ru.Utime.Nano() + ru.Stime.Nano()),
	}, nil
}
