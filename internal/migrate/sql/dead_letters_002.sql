-- dead_letters version 2: autovacuum once 1% of the archive is dead (Postgres' default is
-- 20%), as for the idempotency records: rows expire continuously and are pruned in steps.
ALTER TABLE "choreo_dead_letters" SET (autovacuum_vacuum_scale_factor = 0.01);
