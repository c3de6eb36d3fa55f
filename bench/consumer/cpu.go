package main

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// cpuTime is CPU time consumed so far: by the whole machine (every process, from
// /proc/stat) and by this process (getrusage). Two samples around a mode give the CPU one
// event costs, which is what bounds throughput when the cores are saturated.
type cpuTime struct {
	machine, self time.Duration
}

// userHz is the unit of /proc/stat (USER_HZ, 100 on Linux).
const userHz = 100

func sampleCPU() (cpuTime, error) {
	f, err := os.Open("/proc/stat")
	if err != nil {
		return cpuTime{}, err
	}
	defer f.Close()
	line, err := bufio.NewReader(f).ReadString('\n')
	if err != nil {
		return cpuTime{}, err
	}
	// cpu user nice system idle iowait irq softirq steal ...
	fields := strings.Fields(line)
	if len(fields) < 9 || fields[0] != "cpu" {
		return cpuTime{}, fmt.Errorf("/proc/stat: unexpected first line %q", line)
	}
	var busy int64
	for i, f := range fields[1:9] {
		if i == 3 || i == 4 { // idle, iowait
			continue
		}
		n, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			return cpuTime{}, fmt.Errorf("/proc/stat: %w", err)
		}
		busy += n
	}
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return cpuTime{}, err
	}
	return cpuTime{
		machine: time.Duration(busy) * time.Second / userHz,
		self:    rusageTime(&ru),
	}, nil
}

func rusageTime(ru *syscall.Rusage) time.Duration {
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// perEvent returns the CPU per event between two samples; client is this process's share
// (or, for pgbench, the pgbench process's: pass it as clientOverride).
func perEvent(before, after cpuTime, events int, clientOverride time.Duration) (machine, client time.Duration) {
	if events <= 0 {
		return 0, 0
	}
	client = after.self - before.self
	if clientOverride > 0 {
		client = clientOverride
	}
	return (after.machine - before.machine) / time.Duration(events), client / time.Duration(events)
}
