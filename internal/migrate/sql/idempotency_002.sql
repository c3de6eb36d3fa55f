-- idempotency version 2: autovacuum once 1% of the records are dead (Postgres' default is
-- 20%). The table holds a retention window of live records and the sweeper deletes the
-- expired ones in small steps; at the default a 7-day table would carry about 1.4 days of
-- dead rows before their space could be reused.
ALTER TABLE "choreo_idempotency" SET (autovacuum_vacuum_scale_factor = 0.01);
