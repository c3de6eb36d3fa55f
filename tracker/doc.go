// Package tracker follows choreographed sagas from the outside: it reads the saga topics
// with a consumer group of its own, indexes every event by correlation id in Postgres, and
// tells which sagas are in flight, stuck or completed, without code in the services.
//
// Sagas are declared in a few lines (a Config, or JSON read by LoadConfig): a name, the
// event types that start and end one, and per-step expectations such as "after
// payment.authorized, expect stock.* within 30s". Type patterns are globs as in
// path.Match. A saga that has not ended and has an expectation whose window has passed
// unmet is stuck; Stuck names the step, the expected types and the service expected to
// answer — the source that produced a matching type, as observed in the index, else the
// step's declared Service.
//
// Each indexed event keeps its id, type, source, subject, time, trace id (from the
// traceparent header), causation id and Kafka position. The table's primary key is
// (topic, partition, offset), so redelivered records add nothing. Records on
// "<topic>.dlq" are indexed as dead letters with their choreo_dlq_reason and
// choreo_dlq_error headers and joined to their saga by correlation id. Retain (and Run,
// every refresh interval) deletes events older than the retention age in bounded batches,
// each pass from where the last one stopped (every tenth from the first row).
//
// Usage:
//
//	cfg, err := tracker.LoadConfig("deploy/tracker/order.json")
//	tr, err := tracker.New(pool, cfg)
//	err = tracker.Migrate(ctx, pool, "")
//	go tr.Run(ctx, brokers)          // its own consumer group, DefaultGroup
//	stuck, err := tr.Stuck(ctx)      // []Summary, Waiting says on what
//	tl, err := tr.Saga(ctx, "o-42")  // events and dead letters in time order
//	flow, err := tr.FlowRecent(ctx, time.Hour) // which event types follow which, by whom, how soon
//	svg := flow.SVG()                // the flow as a self-contained SVG
//	doc, err := flow.AsyncAPI("sagas", "1", tracker.Registrations("shipping", svc.Router)...)
//
// Metrics go to the OTel global meter provider (or WithMeter): choreo.tracker.sagas.in_flight
// and choreo.tracker.sagas.stuck (gauges per saga, and per step for stuck, as of the last
// Refresh), choreo.tracker.saga.duration (end-to-end latency per saga, seconds),
// choreo.tracker.events.indexed and choreo.tracker.events.skipped (records without a
// correlation id or type).
//
// Statuses are computed when asked, from the index and the tracker's clock (WithNow), so a
// window passing needs no new event. Ingest keeps one summary row per saga (its start,
// end, counts and the deadline of its earliest unmet expectation) beside the index, so
// Find, List and Stuck read the summaries through their indexes, never the events; Find
// with a Limit reads a bounded number of rows. Triggers keep the number of summaries of
// each kind, so Counts reads only the unended sagas, those totals and each kind's
// earliest start, not every summary.
//
// Ingest also places every event in the flow (the event it follows, by causation id or
// time, and the gap) and triggers tally those places per minute, so Flow and FlowRecent
// read tallies, not events: FlowRecent's work is that of the window's minutes and edges.
// Counts are exact; the gap percentiles come from a histogram, within GapResolution.
//
// The summaries and the flow follow the current declarations: Rebuild recomputes them
// from the index and records the declarations' Fingerprint; Run calls it when it starts
// only when RebuildNeeded (the declarations or the format changed, or the index was never
// rebuilt, as one filled by a version without summaries), since it reads every indexed
// event.
package tracker
