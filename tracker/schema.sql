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
