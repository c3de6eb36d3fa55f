package benchutil

import "time"

// CPUTime is CPU time consumed: by the whole machine (every process; its busy time, not
// idle or iowait) and by one process. Two samples around a run give the CPU the run cost,
// which is what bounds throughput once the cores are saturated.
type CPUTime struct {
	Machine time.Duration
	Process time.Duration
}

// Sub returns the CPU time consumed between sample b and the later sample c.
func (c CPUTime) Sub(b CPUTime) CPUTime {
	return CPUTime{Machine: c.Machine - b.Machine, Process: c.Process - b.Process}
}

// Per divides c by n, e.g. into the CPU per event; it returns zero for n <= 0.
func (c CPUTime) Per(n int) CPUTime {
	if n <= 0 {
		return CPUTime{}
	}
	return CPUTime{Machine: c.Machine / time.Duration(n), Process: c.Process / time.Duration(n)}
}
