-- choreo dead-letter archive: the full original of every record DeadLetter could not
-- (or could only partly) copy to its dead-letter topic. Runnable as is; a
-- DeadLetterArchive with another table name renders it by replacing the quoted
-- identifier "choreo_dead_letters". Migrate runs it after taking an advisory lock.
CREATE TABLE IF NOT EXISTS "choreo_dead_letters" (
    id           bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    group_name   text        NOT NULL,  -- consumer group that gave up
    topic        text        NOT NULL,  -- source topic
    partition    integer     NOT NULL,
    "offset"     bigint      NOT NULL,
    record_time  timestamptz NOT NULL,  -- the record's timestamp
    key          bytea,
    value        bytea,
    headers      jsonb       NOT NULL DEFAULT '[]',  -- [{"key":"ce_id","value":"<base64>"},...]
    value_size   bigint      NOT NULL,  -- octet_length(value), also when value is NULL (0)
    value_sha256 bytea       NOT NULL,  -- SHA-256 of value
    dlq_topic    text        NOT NULL,  -- the dead-letter topic the copy was meant for
    reason       text        NOT NULL,  -- a consumer.Reason* value
    error        text        NOT NULL,  -- the handling error
    dlq_error    text        NOT NULL,  -- why the dead-letter topic refused the full copy
    attempts     integer     NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    -- A record handed over again after its archive row was written (the bounded copy
    -- failed, or the worker stopped) finds its row instead of adding another.
    UNIQUE (group_name, topic, partition, "offset", value_sha256)
);
