#!/usr/bin/env bash
# Orders per second and latency through ONE replica on the machine's PostgreSQL
# (fsync on) and Redis, for one hot SKU and for 100 SKUs, driven by wrk.
# Usage: scripts/service-bench.sh   (DURATION=15s CONNECTIONS=64 to change the load)
set -euo pipefail
cd "$(dirname "$0")/.."
: "${DATABASE_URL:=postgres://postgres@127.0.0.1:5432/test?sslmode=disable}"
: "${REDIS_URL:=redis://127.0.0.1:6379/0}"
: "${DURATION:=15s}" "${CONNECTIONS:=64}" "${ADDR:=127.0.0.1:18181}"
command -v wrk >/dev/null || { echo "needs wrk (apt-get install wrk)"; exit 2; }

schema="bench_$(date +%s)"
ns="bench$(date +%s)"
psql "${DATABASE_URL}" -qc "CREATE SCHEMA ${schema}"
dburl="${DATABASE_URL}&search_path=${schema}"
bin=$(mktemp -d)/stockguard
go build -o "$bin" ./cmd/stockguard
cleanup() {
  kill "${pid:-0}" 2>/dev/null || true; wait "${pid:-0}" 2>/dev/null || true
  psql "${DATABASE_URL}" -qc "DROP SCHEMA ${schema} CASCADE" >/dev/null 2>&1 || true
  redis-cli -u "$REDIS_URL" --scan --pattern "{${ns}:*" | xargs -r redis-cli -u "$REDIS_URL" del >/dev/null || true
}
trap cleanup EXIT

DATABASE_URL="$dburl" REDIS_URL="$REDIS_URL" STOCKGUARD_NAMESPACE="$ns" STOCKGUARD_ADMIN_TOKEN=bench \
  STOCKGUARD_ADDR="$ADDR" STOCKGUARD_LOG_LEVEL=warn "$bin" serve > /dev/null &
pid=$!
for _ in $(seq 1 100); do curl -sf "http://$ADDR/readyz" >/dev/null && break; sleep 0.1; done
for i in $(seq 0 99); do
  curl -sf -XPOST -H 'Authorization: Bearer bench' -H 'Content-Type: application/json' \
    -d '{"quantity":1000000000}' "http://$ADDR/v1/skus/S-$i/restock" >/dev/null
done
echo "one replica, PostgreSQL + Redis on loopback, wrk -c${CONNECTIONS} -t2 -d${DURATION}, quantity 1 per order"
for skus in 1 100; do
  SKUS=$skus wrk -c"$CONNECTIONS" -t2 -d"$DURATION" --latency -s scripts/order.lua "http://$ADDR" | grep RESULT
done
curl -sf -H 'Authorization: Bearer bench' "http://$ADDR/v1/audit" | grep -o '"oversold":[0-9]*,"consistent":[a-z]*$' \
  | sed 's/^/audit after the runs: /' || true
