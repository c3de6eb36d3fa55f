// Command bomb measures what a compression bomb costs a consumer running the standard
// chain with a dead-letter archive: peak RSS, bytes archived, and the time until the
// record after the bomb is handled. It starts an in-process kfake broker, produces a
// zstd-compressed JSON value of one repeated 16 KiB block and a record after it, then
// runs the consumer in a child process (so that its peak RSS is its own), once with the
// default limits and once with franz-go's and the archive's former bounds (a 1 GiB
// decompressed batch, a whole value archived):
//
//	go run ./bench/bomb -sizes 64,200
//
// It needs Postgres on 127.0.0.1:5432 (user postgres); it creates and drops a database.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/choreo-saga/choreo/consumer"
	"github.com/choreo-saga/choreo/event"
	"github.com/choreo-saga/choreo/migrate"
)

const pgBase = "postgres://postgres@127.0.0.1:5432/"

type result struct {
	Mode          string  `json:"mode"`
	MiB           int     `json:"mib"`
	BaseRSSMiB    float64 `json:"base_rss_mib"`
	PeakRSSMiB    float64 `json:"peak_rss_mib"`
	ArchivedBytes int64   `json:"archived_bytes"`
	Seconds       float64 `json:"seconds_to_next_record"`
	Reason        string  `json:"bomb_reason"`
}

func main() {
	if os.Getenv("BOMB_CHILD") != "" {
		child()
		return
	}
	sizes := flag.String("sizes", "64,200", "bomb sizes in MiB")
	flag.Parse()
	ctx := context.Background()
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "bomb.events"),
		kfake.BrokerConfigs(map[string]string{"message.max.bytes": strconv.Itoa(1 << 30)}))
	check(err)
	defer cluster.Close()
	brokers := cluster.ListenAddrs()
	admin, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	check(err)
	_, err = kadm.NewClient(admin).CreateTopic(ctx, 1, 1, nil, "bomb.events.dlq")
	check(err)
	fmt.Printf("%-7s %8s %10s %10s %16s %8s %s\n", "MODE", "BOMB", "BASE RSS", "PEAK RSS", "ARCHIVED BYTES", "SECONDS", "REASON")
	for _, s := range strings.Split(*sizes, ",") {
		mib, err := strconv.Atoi(strings.TrimSpace(s))
		check(err)
		for _, mode := range []string{"before", "after"} {
			produceBomb(ctx, brokers, mib)
			r := runChild(brokers, mode, mib)
			fmt.Printf("%-7s %5d MiB %6.0f MiB %6.0f MiB %16d %8.1f %s\n", r.Mode, r.MiB, r.BaseRSSMiB, r.PeakRSSMiB,
				r.ArchivedBytes, r.Seconds, r.Reason)
		}
	}
}

// produceBomb produces the bomb and, in a batch of its own, the record after it.
func produceBomb(ctx context.Context, brokers []string, mib int) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.DefaultProduceTopic("bomb.events"),
		kgo.ProducerBatchMaxBytes(int32(mib+8)<<20), kgo.MaxBufferedBytes((mib+16)<<20), kgo.BrokerMaxWriteBytes(int32(mib+16)<<20),
		kgo.ProducerBatchCompression(kgo.ZstdCompression()))
	check(err)
	defer cl.Close()
	// A 16 KiB block of letters and digits, which JSON carries unescaped.
	var block strings.Builder
	for i := range 16 << 10 {
		block.WriteByte("abcdefghijklmnopqrstuvwxyz0123456789"[(i*7919+i/36)%36])
	}
	n := mib<<20 - 64 // the JSON object around the blob
	blob := strings.Repeat(block.String(), n/block.Len()+1)[:n]
	bomb := record("bomb", map[string]string{"blob": blob})
	check(cl.ProduceSync(ctx, bomb).FirstErr())
	check(cl.ProduceSync(ctx, record("next", map[string]int{"n": 1})).FirstErr())
}

func record(subject string, data any) *kgo.Record {
	ev, err := event.New("bomb", "bomb.step", "c-"+subject, data)
	check(err)
	ev.Subject = subject
	r, err := event.ToRecord("bomb.events", ev)
	check(err)
	return r
}

func runChild(brokers []string, mode string, mib int) result {
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), "BOMB_CHILD=1", "BOMB_BROKERS="+strings.Join(brokers, ","), "BOMB_MODE="+mode,
		"BOMB_MIB="+strconv.Itoa(mib))
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	check(err)
	var r result
	check(json.Unmarshal(out, &r))
	return r
}

// child consumes bomb.events in a group of its own until the record after the bomb is
// handled, and prints its result.
func child() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	mode := os.Getenv("BOMB_MODE")
	mib, _ := strconv.Atoi(os.Getenv("BOMB_MIB"))
	brokers := strings.Split(os.Getenv("BOMB_BROKERS"), ",")
	db := fmt.Sprintf("choreo_bomb_%d", os.Getpid())
	admin, err := pgx.Connect(ctx, pgBase+"postgres")
	check(err)
	_, err = admin.Exec(ctx, "CREATE DATABASE "+db)
	check(err)
	defer func() { _, _ = admin.Exec(context.Background(), "DROP DATABASE "+db+" WITH (FORCE)") }()
	pool, err := pgxpool.New(ctx, pgBase+db)
	check(err)
	defer pool.Close()
	check(migrate.Up(ctx, pool))
	producer, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	check(err)
	defer producer.Close()

	var archiveOpts []consumer.ArchiveOption
	opts := []consumer.Option{consumer.WithClientOptions(kgo.ConsumeResetOffset(kgo.NewOffset().AtEnd().Relative(-2)))}
	if mode == "before" { // franz-go's default bound and a whole value archived
		archiveOpts = append(archiveOpts, consumer.ArchiveValueBytes(1<<30))
		opts = append(opts, consumer.WithClientOptions(kgo.MaxDecompressBatchBytes(1<<30),
			kgo.FetchMaxPartitionBytes(1<<20), kgo.FetchMaxBytes(50<<20), kgo.BrokerMaxReadBytes(100<<20)))
	}
	archive, err := consumer.NewDeadLetterArchive(pool, "", archiveOpts...)
	check(err)
	handled := make(chan struct{})
	h, err := consumer.Standard(consumer.StandardConfig{DB: pool, DeadLetter: producer, DeadLetterArchive: archive,
		Handler: func(_ context.Context, _ pgx.Tx, ev event.Event) error {
			if ev.Subject == "next" {
				close(handled)
			}
			return nil
		}})
	check(err)
	c, err := consumer.New(brokers, fmt.Sprintf("bomb-%s-%d", mode, os.Getpid()), []string{"bomb.events"}, h, opts...)
	check(err)
	r := result{Mode: mode, MiB: mib, BaseRSSMiB: status("VmRSS")}
	start := time.Now()
	go func() { _ = c.Run(ctx) }()
	select {
	case <-handled:
	case <-ctx.Done():
		log.Fatal("the record after the bomb was not handled")
	}
	r.Seconds = time.Since(start).Seconds()
	r.PeakRSSMiB = status("VmHWM")
	check(pool.QueryRow(ctx, `SELECT coalesce(sum(octet_length(key) + octet_length(value) + octet_length(headers::text)), 0) FROM `+
		consumer.DefaultDeadLetterTable).Scan(&r.ArchivedBytes))
	r.Reason = dlqReason(ctx, brokers)
	check(json.NewEncoder(os.Stdout).Encode(r))
}

// dlqReason returns the reason of the last record of the dead-letter topic.
func dlqReason(ctx context.Context, brokers []string) string {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics("bomb.events.dlq"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtEnd().Relative(-1)))
	check(err)
	defer cl.Close()
	fs := cl.PollFetches(ctx)
	for _, r := range fs.Records() {
		for _, h := range r.Headers {
			if h.Key == consumer.HeaderDLQReason {
				return string(h.Value)
			}
		}
	}
	return "?"
}

// status returns a memory line of /proc/self/status in MiB.
func status(key string) float64 {
	f, err := os.Open("/proc/self/status")
	check(err)
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if rest, ok := strings.CutPrefix(s.Text(), key+":"); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 64)
			return kb / 1024
		}
	}
	return 0
}

func check(err error) {
	if err != nil {
		log.Fatal(err)
	}
}
