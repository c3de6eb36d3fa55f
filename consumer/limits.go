package consumer

import (
	"context"
	"fmt"

	"github.com/twmb/franz-go/pkg/kgo"
)

const (
	// batchFactor: a batch may decompress to batchFactor records of the maximum size.
	batchFactor = 8
	// fetchFactor: a fetch response holds at most fetchFactor records' worth of
	// compressed bytes (besides the first batch, which a broker always returns whole).
	fetchFactor = 16
)

// FetchLimits returns the franz-go options that bound what a record may cost a client
// that consumes records of at most maxRecordBytes (see WithMaxRecordBytes for n's range):
//
//   - kgo.MaxDecompressBatchBytes(8·n): a compressed batch is decompressed into at most
//     this many bytes; one that would grow past it is not decompressed further, and
//     polling returns a *kgo.ErrDecompressTooLarge for it (see SkipBatch). The 64 MiB
//     value of a compression bomb costs 8 MiB, not 64.
//   - kgo.FetchMaxPartitionBytes(n) and kgo.FetchMaxBytes(16·n): the compressed bytes
//     one fetch asks for, per partition and in all.
//   - kgo.BrokerMaxReadBytes(2·16·n + n): the largest response read from a broker.
//
// What remains: the bound is per batch. A fetch of many small compressed batches, each
// decompressing to just under 8·n, costs up to that much per batch until its records are
// handled.
func FetchLimits(n int) ([]kgo.Opt, error) {
	if n < MinMaxRecordBytes || n > MaxMaxRecordBytes {
		return nil, invalidOption("max record bytes %d: want %d to %d", n, MinMaxRecordBytes, MaxMaxRecordBytes)
	}
	fetch := int32(fetchFactor * n)
	return []kgo.Opt{
		kgo.MaxDecompressBatchBytes(batchFactor * n),
		kgo.FetchMaxPartitionBytes(int32(n)),
		kgo.FetchMaxBytes(fetch),
		kgo.BrokerMaxReadBytes(2*fetch + int32(n)),
	}, nil
}

// WithMaxRecordBytes sets the record size the client's fetch limits are set from
// (default DefaultMaxRecordBytes; see FetchLimits), from MinMaxRecordBytes to
// MaxMaxRecordBytes. Give the decoder the same limit (event.WithMaxPayloadBytes in
// StandardConfig.Decode). Fetch options given to WithClientOptions win.
//
// A batch that decompresses past the bound is dead-lettered without being decompressed
// further: its records are replaced by one with no key, value or headers, at the batch's
// last offset, whose decoding fails with ErrBatchTooLarge (reason "too_large"), and the
// partition moves on past the batch.
func WithMaxRecordBytes(n int) Option {
	return func(c *config) error {
		if _, err := FetchLimits(n); err != nil {
			return err
		}
		c.maxRecordBytes = n
		return nil
	}
}

// batchTooLargeKey marks the record that stands for a batch that decompresses past the
// client's bound; its value is the *kgo.ErrDecompressTooLarge. It lives in the record's
// Context, which no broker or producer can set.
type batchTooLargeKey struct{}

// batchTooLargeRecord returns the record that stands for the batch e names: at its last
// offset, so that settling it moves the partition past the batch.
func batchTooLargeRecord(e *kgo.ErrDecompressTooLarge) *kgo.Record {
	return &kgo.Record{Topic: e.Topic, Partition: e.Partition, Offset: e.NextOffset - 1, LeaderEpoch: e.Epoch,
		Context: context.WithValue(context.Background(), batchTooLargeKey{}, e)}
}

// batchTooLarge returns the error of a record that batchTooLargeRecord made, or nil.
func batchTooLarge(r *kgo.Record) error {
	if r.Context == nil {
		return nil
	}
	e, ok := r.Context.Value(batchTooLargeKey{}).(*kgo.ErrDecompressTooLarge)
	if !ok {
		return nil
	}
	return Reject(ReasonTooLarge, fmt.Errorf("%w: %s[%d] offsets %d to %d: %w",
		ErrBatchTooLarge, e.Topic, e.Partition, e.Offset, e.NextOffset-1, kgo.ErrMaxDecompress))
}

// SkipBatch makes cl, a group consumer with kgo.AutoCommitMarks, fetch the partition of
// e again after the batch e names: franz-go stops fetching a partition at such a batch.
// Call it from the poll loop, before allowing a rebalance. The group's committed offset
// moves past the batch with the next offset committed after it.
func SkipBatch(cl *kgo.Client, e *kgo.ErrDecompressTooLarge) {
	if _, known := cl.CommittedOffsets()[e.Topic][e.Partition]; !known {
		// Nothing was polled or committed on the partition yet, so the batch is where
		// consuming started: the mark makes the partition known to SetOffsets.
		cl.MarkCommitOffsets(map[string]map[int32]kgo.EpochOffset{e.Topic: {e.Partition: {Epoch: e.Epoch, Offset: e.Offset}}})
	}
	cl.SetOffsets(map[string]map[int32]kgo.EpochOffset{e.Topic: {e.Partition: {Epoch: e.Epoch, Offset: e.NextOffset}}})
}
