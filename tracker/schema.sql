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
-- once it has passed, so List, Stuck and Counts read this table, not the events.
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
