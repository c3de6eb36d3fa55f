//go:build !linux

package benchutil

import (
	"errors"
	"fmt"
)

// SampleCPU returns the CPU time consumed so far by the machine and by this process. It
// reads Linux's /proc/stat: here it returns an error wrapping errors.ErrUnsupported.
func SampleCPU() (CPUTime, error) {
	return CPUTime{}, fmt.Errorf("benchutil: CPU sampling needs Linux /proc/stat: %w", errors.ErrUnsupported)
}
