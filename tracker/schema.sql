CREATE TABLE IF NOT EXISTS {{.Table}} (
	topic          text        NOT NULL,
	partition      integer     NOT NULL,
	"offset"       bigint      NOT NULL,
	correlation_id text        NOT NULL,
	event_id       text        NOT NULL,
	type           text        NOT NULL,
	source         text        NOT NULL,
	subject        text        NOT NULL,
	event_time     timestamptz NOT NULL,
	trace_id       text        NOT NULL DEFAULT '',
	causation_id   text        NOT NULL DEFAULT '',
	dead_letter    boolean     NOT NULL DEFAULT false,
	dlq_reason     text        NOT NULL DEFAULT '',
	dlq_error      text        NOT NULL DEFAULT '',
	indexed_at     timestamptz NOT NULL DEFAULT now(),
	PRIMARY KEY (topic, partition, "offset")
);
CREATE INDEX IF NOT EXISTS {{.Index}}_corr ON {{.Table}} (correlation_id, event_time);
CREATE INDEX IF NOT EXISTS {{.Index}}_time ON {{.Table}} (event_time);
-- One row per saga (declared kind × correlation id), recomputed from the events whenever
-- one of its correlation id's records is indexed. indexed (the latest indexed_at) and seen
-- (the row count) of the rows it was computed from order the computations: one that
-- missed a row never overwrites one that saw it. deadline is the
-- earliest deadline of an unmet expectation (NULL when none or ended): the saga is stuck
-- once it has passed, so List, Stuck and Counts read this table, not the events. Counts
-- reads the unended sagas' kinds and deadlines (sagas_unended, an index-only scan), the
-- earliest start of each kind (sagas_kind) and the totals below, not every saga.
CREATE TABLE IF NOT EXISTS {{.Table}}_sagas (
	correlation_id  text        NOT NULL,
	saga            text        NOT NULL,
	started         timestamptz NOT NULL,
	ended           timestamptz,
	last_type       text        NOT NULL,
	last_at         timestamptz NOT NULL,
	events          integer     NOT NULL,
	dead_letters    integer     NOT NULL,
	seen            integer     NOT NULL,
	deadline        timestamptz,
	step            text        NOT NULL DEFAULT '',
	expected        text[]      NOT NULL DEFAULT '{}',
	service         text        NOT NULL DEFAULT '',
	after_topic     text        NOT NULL DEFAULT '',
	after_partition integer     NOT NULL DEFAULT 0,
	after_offset    bigint      NOT NULL DEFAULT 0,
	PRIMARY KEY (correlation_id, saga)
);
ALTER TABLE {{.Table}}_sagas ADD COLUMN IF NOT EXISTS indexed timestamptz NOT NULL DEFAULT '-infinity';
CREATE INDEX IF NOT EXISTS {{.Index}}_sagas_started ON {{.Table}}_sagas (started);
CREATE INDEX IF NOT EXISTS {{.Index}}_sagas_deadline ON {{.Table}}_sagas (deadline) WHERE ended IS NULL;
CREATE INDEX IF NOT EXISTS {{.Index}}_sagas_last ON {{.Table}}_sagas (last_at);
CREATE INDEX IF NOT EXISTS {{.Index}}_sagas_kind ON {{.Table}}_sagas (saga, started);
CREATE INDEX IF NOT EXISTS {{.Index}}_sagas_unended ON {{.Table}}_sagas (saga, deadline) WHERE ended IS NULL;
-- How many summaries of each kind {{.Table}}_sagas holds (no row for a kind with none),
-- kept exact by the triggers below: Counts' completed sagas are a kind's total less its
-- unended ones. Created with a count of the summaries already there, under a lock that
-- keeps writers out until the transaction that also creates the triggers commits: apply
-- this schema in one transaction, as Migrate does.
DO $$
BEGIN
	IF to_regclass('{{.Table}}_saga_totals') IS NULL THEN
		CREATE TABLE {{.Table}}_saga_totals (
			saga  text   PRIMARY KEY,
			total bigint NOT NULL
		);
		LOCK TABLE {{.Table}}_sagas IN SHARE ROW EXCLUSIVE MODE;
		INSERT INTO {{.Table}}_saga_totals (saga, total)
		SELECT saga, count(*) FROM {{.Table}}_sagas GROUP BY saga;
	END IF;
END
$$;
-- Adds the summaries a statement inserted into {{.Table}}_sagas to their kind's total
-- and takes off those it deleted, one update per kind; a total that reaches zero is
-- deleted, a truncation deletes them all. The upsert's updates are not in new_rows (an
-- INSERT's transition table holds the rows it inserted) and never change a kind, which
-- is part of the key, so no UPDATE trigger is needed.
CREATE OR REPLACE FUNCTION {{.Table}}_saga_total() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	IF TG_OP = 'TRUNCATE' THEN
		DELETE FROM {{.Table}}_saga_totals;
	ELSIF TG_OP = 'INSERT' THEN
		INSERT INTO {{.Table}}_saga_totals AS t (saga, total)
		SELECT saga, count(*) FROM new_rows GROUP BY saga ORDER BY saga
		ON CONFLICT (saga) DO UPDATE SET total = t.total + excluded.total;
	ELSE
		INSERT INTO {{.Table}}_saga_totals AS t (saga, total)
		SELECT saga, -count(*) FROM old_rows GROUP BY saga ORDER BY saga
		ON CONFLICT (saga) DO UPDATE SET total = t.total + excluded.total;
		DELETE FROM {{.Table}}_saga_totals t USING (SELECT DISTINCT saga FROM old_rows) o
		WHERE t.total = 0 AND t.saga = o.saga;
	END IF;
	RETURN NULL;
END
$$;
DROP TRIGGER IF EXISTS saga_total_insert ON {{.Table}}_sagas;
CREATE TRIGGER saga_total_insert AFTER INSERT ON {{.Table}}_sagas
	REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION {{.Table}}_saga_total();
DROP TRIGGER IF EXISTS saga_total_delete ON {{.Table}}_sagas;
CREATE TRIGGER saga_total_delete AFTER DELETE ON {{.Table}}_sagas
	REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION {{.Table}}_saga_total();
DROP TRIGGER IF EXISTS saga_total_truncate ON {{.Table}}_sagas;
CREATE TRIGGER saga_total_truncate AFTER TRUNCATE ON {{.Table}}_sagas
	FOR EACH STATEMENT EXECUTE FUNCTION {{.Table}}_saga_total();
-- The payload schema version of each indexed event (ce_dataschemaversion).
ALTER TABLE {{.Table}} ADD COLUMN IF NOT EXISTS schema_version integer NOT NULL DEFAULT 1;
-- Every producer (source) observed per event type and schema version, with when it was
-- first and last seen; kept past the retention of the events (see Usage).
CREATE TABLE IF NOT EXISTS {{.Table}}_versions (
	type       text        NOT NULL,
	version    integer     NOT NULL,
	source     text        NOT NULL,
	first_seen timestamptz NOT NULL,
	last_seen  timestamptz NOT NULL,
	PRIMARY KEY (type, version, source)
);
-- The latest observed producer of every event type: who is expected to answer a step.
CREATE TABLE IF NOT EXISTS {{.Table}}_types (
	type      text        PRIMARY KEY,
	source    text        NOT NULL,
	last_seen timestamptz NOT NULL
);
-- Records the tracker did not index as they were: stored with fields escaped or cut
-- (action 'escaped'), or not stored (action 'skipped': Postgres refused the row, or the
-- batch decompresses past the client's bound). Retention deletes them by at.
CREATE TABLE IF NOT EXISTS {{.Table}}_rejected (
	topic     text        NOT NULL,
	partition integer     NOT NULL,
	"offset"  bigint      NOT NULL,
	action    text        NOT NULL,
	detail    text        NOT NULL,
	at        timestamptz NOT NULL DEFAULT now(),
	PRIMARY KEY (topic, partition, "offset")
);
CREATE INDEX IF NOT EXISTS {{.Index}}_rejected_at ON {{.Table}}_rejected (at);
-- Observed payloads that break the schema a service declares for their (type, version)
-- (WithContracts): one row per record and declaring service. Retention deletes them by at.
CREATE TABLE IF NOT EXISTS {{.Table}}_violations (
	topic          text        NOT NULL,
	partition      integer     NOT NULL,
	"offset"       bigint      NOT NULL,
	service        text        NOT NULL,
	role           text        NOT NULL,
	source         text        NOT NULL,
	type           text        NOT NULL,
	version        integer     NOT NULL,
	correlation_id text        NOT NULL,
	detail         text        NOT NULL,
	at             timestamptz NOT NULL DEFAULT now(),
	PRIMARY KEY (topic, partition, "offset", service, role)
);
CREATE INDEX IF NOT EXISTS {{.Index}}_violations_at ON {{.Table}}_violations (at);
CREATE INDEX IF NOT EXISTS {{.Index}}_violations_corr ON {{.Table}}_violations (correlation_id);
-- Retention deletes old events and sagas continuously: autovacuum once 1% of them are dead
-- (Postgres' default is 20%), so their space is reused within about one retention step.
ALTER TABLE {{.Table}} SET (autovacuum_vacuum_scale_factor = 0.01);
ALTER TABLE {{.Table}}_sagas SET (autovacuum_vacuum_scale_factor = 0.01);
-- The observed flow (Flow), kept at ingest. One row per distinct event (correlation id ×
-- event id, dead letters left out) with its place in the flow: whether it came first in
-- its correlation id, the type of the event it follows (its causation event when indexed,
-- else the event before it; NULL when none), whether by causation, and the gap between
-- the two event times. Ingest recomputes the rows a batch's records can change (theirs,
-- the next after each, those they cause), replacing a row only when it differs and by one
-- computed from as late an indexed row and at least as many rows, as for the summaries. Triggers add every change to the per-minute tallies below, so they
-- always equal the tally of these rows; retention deletes these rows by event_time.
CREATE TABLE IF NOT EXISTS {{.Table}}_flow_events (
	correlation_id text        NOT NULL,
	event_id       text        NOT NULL,
	type           text        NOT NULL,
	source         text        NOT NULL,
	topic          text        NOT NULL,
	event_time     timestamptz NOT NULL,
	first          boolean     NOT NULL,
	from_type      text,
	caused         boolean     NOT NULL DEFAULT false,
	gap_us         bigint,
	indexed        timestamptz NOT NULL,
	seen           integer     NOT NULL,
	PRIMARY KEY (correlation_id, event_id)
);
CREATE INDEX IF NOT EXISTS {{.Index}}_flow_events_time ON {{.Table}}_flow_events (event_time);
-- Per minute (UTC) of the following event's time: how many events of to_type by source
-- followed a from_type event, how many of them by causation, per gap bucket (see
-- {{.Table}}_gap_bucket).
CREATE TABLE IF NOT EXISTS {{.Table}}_flow_edges (
	minute     timestamptz NOT NULL,
	from_type  text        NOT NULL,
	to_type    text        NOT NULL,
	source     text        NOT NULL,
	gap_bucket smallint    NOT NULL,
	count      bigint      NOT NULL,
	caused     bigint      NOT NULL,
	PRIMARY KEY (minute, from_type, to_type, source, gap_bucket)
);
-- Per minute (UTC) of the event time: events of a type by source on a topic, and how many
-- of them came first in their correlation id.
CREATE TABLE IF NOT EXISTS {{.Table}}_flow_nodes (
	minute timestamptz NOT NULL,
	type   text        NOT NULL,
	source text        NOT NULL,
	topic  text        NOT NULL,
	count  bigint      NOT NULL,
	starts bigint      NOT NULL,
	PRIMARY KEY (minute, type, source, topic)
);
-- The gap histogram's bucket of a gap in microseconds: 0 for a gap of zero or less, else
-- 1 + floor(8 log2 gap): eight buckets per doubling, from 1 µs on.
CREATE OR REPLACE FUNCTION {{.Table}}_gap_bucket(gap_us bigint) RETURNS smallint
	LANGUAGE sql IMMUTABLE PARALLEL SAFE
	AS $$ SELECT (CASE WHEN gap_us <= 0 THEN 0 ELSE 1 + floor(8 * ln(gap_us::float8) / ln(2::float8)) END)::smallint $$;
-- Adds the rows a statement inserted into {{.Table}}_flow_events to the tallies and takes
-- off those it updated away or deleted; a tally that reaches zero is deleted.
CREATE OR REPLACE FUNCTION {{.Table}}_flow_tally() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	IF TG_OP IN ('UPDATE', 'DELETE') THEN
		INSERT INTO {{.Table}}_flow_edges AS e (minute, from_type, to_type, source, gap_bucket, count, caused)
		SELECT date_trunc('minute', event_time, 'UTC'), from_type, type, source, {{.Table}}_gap_bucket(gap_us),
			-count(*), -count(*) FILTER (WHERE caused)
		FROM old_rows WHERE from_type IS NOT NULL GROUP BY 1, 2, 3, 4, 5 ORDER BY 1, 2, 3, 4, 5
		ON CONFLICT (minute, from_type, to_type, source, gap_bucket)
		DO UPDATE SET count = e.count + excluded.count, caused = e.caused + excluded.caused;
		INSERT INTO {{.Table}}_flow_nodes AS n (minute, type, source, topic, count, starts)
		SELECT date_trunc('minute', event_time, 'UTC'), type, source, topic, -count(*), -count(*) FILTER (WHERE first)
		FROM old_rows GROUP BY 1, 2, 3, 4 ORDER BY 1, 2, 3, 4
		ON CONFLICT (minute, type, source, topic)
		DO UPDATE SET count = n.count + excluded.count, starts = n.starts + excluded.starts;
	END IF;
	IF TG_OP IN ('INSERT', 'UPDATE') THEN
		INSERT INTO {{.Table}}_flow_edges AS e (minute, from_type, to_type, source, gap_bucket, count, caused)
		SELECT date_trunc('minute', event_time, 'UTC'), from_type, type, source, {{.Table}}_gap_bucket(gap_us),
			count(*), count(*) FILTER (WHERE caused)
		FROM new_rows WHERE from_type IS NOT NULL GROUP BY 1, 2, 3, 4, 5 ORDER BY 1, 2, 3, 4, 5
		ON CONFLICT (minute, from_type, to_type, source, gap_bucket)
		DO UPDATE SET count = e.count + excluded.count, caused = e.caused + excluded.caused;
		INSERT INTO {{.Table}}_flow_nodes AS n (minute, type, source, topic, count, starts)
		SELECT date_trunc('minute', event_time, 'UTC'), type, source, topic, count(*), count(*) FILTER (WHERE first)
		FROM new_rows GROUP BY 1, 2, 3, 4 ORDER BY 1, 2, 3, 4
		ON CONFLICT (minute, type, source, topic)
		DO UPDATE SET count = n.count + excluded.count, starts = n.starts + excluded.starts;
	END IF;
	IF TG_OP IN ('UPDATE', 'DELETE') THEN
		DELETE FROM {{.Table}}_flow_edges e USING (SELECT DISTINCT date_trunc('minute', event_time, 'UTC') AS minute,
			from_type, type, source, {{.Table}}_gap_bucket(gap_us) AS gap_bucket FROM old_rows WHERE from_type IS NOT NULL) o
		WHERE e.count = 0 AND (e.minute, e.from_type, e.to_type, e.source, e.gap_bucket) = (o.minute, o.from_type, o.type, o.source, o.gap_bucket);
		DELETE FROM {{.Table}}_flow_nodes n USING (SELECT DISTINCT date_trunc('minute', event_time, 'UTC') AS minute,
			type, source, topic FROM old_rows) o
		WHERE n.count = 0 AND (n.minute, n.type, n.source, n.topic) = (o.minute, o.type, o.source, o.topic);
	END IF;
	RETURN NULL;
END
$$;
DROP TRIGGER IF EXISTS flow_tally_insert ON {{.Table}}_flow_events;
CREATE TRIGGER flow_tally_insert AFTER INSERT ON {{.Table}}_flow_events
	REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION {{.Table}}_flow_tally();
DROP TRIGGER IF EXISTS flow_tally_update ON {{.Table}}_flow_events;
CREATE TRIGGER flow_tally_update AFTER UPDATE ON {{.Table}}_flow_events
	REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION {{.Table}}_flow_tally();
DROP TRIGGER IF EXISTS flow_tally_delete ON {{.Table}}_flow_events;
CREATE TRIGGER flow_tally_delete AFTER DELETE ON {{.Table}}_flow_events
	REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION {{.Table}}_flow_tally();
ALTER TABLE {{.Table}}_flow_events SET (autovacuum_vacuum_scale_factor = 0.01);
ALTER TABLE {{.Table}}_flow_edges SET (autovacuum_vacuum_scale_factor = 0.01);
ALTER TABLE {{.Table}}_flow_nodes SET (autovacuum_vacuum_scale_factor = 0.01);
-- What the summaries and the flow rows were last rebuilt for (Rebuild): a fingerprint of
-- the saga declarations and of their format. Run rebuilds when it differs.
CREATE TABLE IF NOT EXISTS {{.Table}}_meta (
	key   text PRIMARY KEY,
	value text NOT NULL
);
