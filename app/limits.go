package app

import (
	"fmt"

	"github.com/choreo-saga/choreo/consumer"
)

// Names of the record-size variables of [LoadConfig].
const (
	envMaxRecordBytes         = "MAX_RECORD_BYTES"
	envDeadLetterArchiveBytes = "DEAD_LETTER_ARCHIVE_BYTES"
)

// readLimits reads the record-size variables into c.
func (c *Config) readLimits(env *Env) {
	c.MaxRecordBytes = env.Int(envMaxRecordBytes, consumer.DefaultMaxRecordBytes)
	c.DeadLetterArchiveBytes = env.Int(envDeadLetterArchiveBytes, consumer.DefaultArchiveValueBytes)
}

func (c Config) limitsProblems() []problem {
	var ps []problem
	if n := c.MaxRecordBytes; n != 0 && (n < consumer.MinMaxRecordBytes || n > consumer.MaxMaxRecordBytes) {
		ps = append(ps, problem{envMaxRecordBytes, fmt.Sprintf("must be from %d to %d bytes", consumer.MinMaxRecordBytes, consumer.MaxMaxRecordBytes)})
	}
	if n := c.DeadLetterArchiveBytes; n != 0 && n < 1<<10 {
		ps = append(ps, problem{envDeadLetterArchiveBytes, "must be at least 1024 bytes"})
	}
	return ps
}

// maxRecordBytes returns the configured record limit, or the default for 0.
func (c Config) maxRecordBytes() int {
	if c.MaxRecordBytes == 0 {
		return consumer.DefaultMaxRecordBytes
	}
	return c.MaxRecordBytes
}

// deadLetterArchiveBytes returns the configured archive bound, or the default for 0.
func (c Config) deadLetterArchiveBytes() int {
	if c.DeadLetterArchiveBytes == 0 {
		return consumer.DefaultArchiveValueBytes
	}
	return c.DeadLetterArchiveBytes
}
