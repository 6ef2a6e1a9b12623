#!/usr/bin/env bash
# Starts Debian's Postgres 15 cluster on 127.0.0.1:5432 with password auth for the
# `postgres` user (password `postgres`), for the store's test suite. Idempotent.
set -euo pipefail
if ! pg_lsclusters -h 2>/dev/null | grep -q .; then
  pg_createcluster 15 main
fi
pg_ctlcluster 15 main start 2>/dev/null || pg_ctlcluster 15 main status >/dev/null
for _ in $(seq 1 50); do
  pg_isready -q -h 127.0.0.1 -p 5432 && break
  sleep 0.2
done
su postgres -c "psql -q -c \"ALTER USER postgres PASSWORD 'postgres'\""
pg_isready -h 127.0.0.1 -p 5432
