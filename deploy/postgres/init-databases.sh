#!/bin/sh
# Creates one database and one owning role per choreo service, run once by the postgres
# image's entrypoint on an empty data directory (/docker-entrypoint-initdb.d).
#
#   CHOREO_SERVICES     services to create, space-separated (default "order payment inventory")
#   CHOREO_DB_PASSWORD  password of every service role (default "choreo"; demo only)
#
# Service <s> gets role <s> and database choreo_<s> owned by it, so its migrations can
# create tables in the public schema and it cannot touch the other services' data.
set -eu

services="${CHOREO_SERVICES:-order payment inventory}"
password="${CHOREO_DB_PASSWORD:-choreo}"

for s in $services; do
  echo "init-databases: role $s, database choreo_$s"
  psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --dbname postgres \
    -v role="$s" -v db="choreo_$s" -v password="$password" <<'SQL'
SELECT format('CREATE ROLE %I LOGIN PASSWORD %L', :'role', :'password')
WHERE NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = :'role') \gexec
SELECT format('CREATE DATABASE %I OWNER %I', :'db', :'role')
WHERE NOT EXISTS (SELECT 1 FROM pg_database WHERE datname = :'db') \gexec
REVOKE ALL ON DATABASE :"db" FROM PUBLIC;
SQL
done
