#!/usr/bin/env bash
# soak.sh — a long overload of `levee serve` under ghz that samples the
# server's goroutine count and resident memory, to show both stay bounded
# once the inventory service's order memory (100k order ids) is full.
#
# Not part of `make test`: it takes DURATION plus the prefill (four minutes
# or more on a 2-core machine) and loads both cores. Run it as `make soak`
# or directly:
#
#   DURATION=5m FACTOR=10 scripts/soak.sh
#
# Steps: build cmd/levee; start `levee serve` pinned to CPU 0 with
# GOMAXPROCS=1; measure its capacity with a closed-loop ghz run (successful
# Allocates per second); fill the order memory at capacity (closed loop)
# until PREFILL Allocates are applied — under a 10x overload a CPU-bound
# service applies too few orders to fill it within minutes; then drive it
# open-loop (ghz --async) at FACTOR × that capacity for DURATION. Through
# every phase it samples, every INTERVAL seconds, go_goroutines from
# /metrics, VmRSS from /proc/PID/status, and the calls the service has run
# from /stats (each applied Allocate is a new remembered order until ORDERS
# are). Writes OUT/samples.csv and the ghz summaries, and prints the curve's
# min/max over the run, after the order memory filled, and in the overload.
#
# Environment (defaults): DURATION (5m), FACTOR (10), RPS (FACTOR × the
# measured capacity), PREFILL (orders applied before the overload: twice
# ORDERS, so that as many again churn through the full memory; 0: none),
# CPU_WORK (1ms: a capacity high enough to fill the order memory in
# minutes), TIMEOUT (1s, each call's deadline), INTERVAL (5), ADDR
# (127.0.0.1:50171), METRICS (127.0.0.1:9171), OUT (a new directory under
# /tmp), BIN (/tmp/levee-soak), GHZ (ghz on PATH or ~/go/bin/ghz), ORDERS
# (100000, the service's DefaultOrderMemory), CHUNK (30: seconds per ghz
# run in the overload).
set -euo pipefail

cd "$(dirname "$0")/.."

DURATION=${DURATION:-5m}
FACTOR=${FACTOR:-10}
RPS=${RPS:-}
CPU_WORK=${CPU_WORK:-1ms}
INTERVAL=${INTERVAL:-5}
ADDR=${ADDR:-127.0.0.1:50171}
METRICS=${METRICS:-127.0.0.1:9171}
OUT=${OUT:-$(mktemp -d /tmp/levee-soak.XXXXXX)}
BIN=${BIN:-/tmp/levee-soak}
GHZ=${GHZ:-$(command -v ghz || echo "$HOME/go/bin/ghz")}
ORDERS=${ORDERS:-100000}
TIMEOUT=${TIMEOUT:-1s}
CHUNK=${CHUNK:-30}
PREFILL=${PREFILL:-$((2 * ORDERS))}
PROTO=examples/inventory/proto/corecart/inventory/v1/inventory.proto
CALL=corecart.inventory.v1.InventoryService/Allocate

for tool in "$GHZ" curl jq; do
	if ! command -v "$tool" >/dev/null; then
		echo "soak: $tool not found (ghz: GOFLAGS= go install github.com/bojand/ghz/cmd/ghz@latest)" >&2
		exit 1
	fi
done
mkdir -p "$OUT"

go build -o "$BIN" ./cmd/levee

# The server on CPU 0, the load generator on CPU 1 when there are two.
client_pin=()
if [ "$(nproc)" -ge 2 ] && command -v taskset >/dev/null; then
	client_pin=(taskset -c 1)
fi
GOMAXPROCS=1 "$BIN" serve -addr "$ADDR" -metrics-addr "$METRICS" -cpu-work "$CPU_WORK" -cpu 0 \
	>"$OUT/serve.log" 2>&1 &
server=$!
ghz_pid=
sampler=
cleanup() {
	if [ -n "$sampler" ]; then kill "$sampler" 2>/dev/null || true; fi
	if [ -n "$ghz_pid" ]; then kill "$ghz_pid" 2>/dev/null || true; fi
	kill "$server" 2>/dev/null || true
	wait "$server" 2>/dev/null || true
}
trap cleanup EXIT

for _ in $(seq 100); do
	curl -sf "http://$METRICS/metrics" >/dev/null && break
	sleep 0.1
done

# The sampler runs through every phase; the phase it saw is the last column.
echo "t_s,goroutines,rss_kb,calls,canceled,phase" >"$OUT/samples.csv"
echo capacity >"$OUT/phase"
start=$(date +%s)
(
	while kill -0 "$server" 2>/dev/null; do
		t=$(($(date +%s) - start))
		g=$(curl -sf "http://$METRICS/metrics" | awk '$1 == "go_goroutines" {print $2}') || true
		rss=$(awk '/^VmRSS:/ {print $2}' "/proc/$server/status" 2>/dev/null) || true
		read -r calls canceled < <(curl -sf "http://$METRICS/stats" | jq -r '.samples[-1] | "\(.calls) \(.canceled)"') || true
		[ -n "$g" ] && [ -n "$rss" ] && echo "$t,$g,$rss,$calls,$canceled,$(cat "$OUT/phase")" | tee -a "$OUT/samples.csv"
		sleep "$INTERVAL"
	done
) &
sampler=$!

ghz_common=(--insecure --proto "$PROTO" --call "$CALL"
	-d '{"sku":"SKU-0001","quantity":1,"order_id":"{{.RequestNumber}}-{{.UUID}}"}'
	--timeout "$TIMEOUT" --connections 4)

# orders prints how many Allocates the service has applied (run and not
# canceled): each is a new remembered order until ORDERS are.
orders() {
	curl -sf "http://$METRICS/stats" | jq -r '.samples[-1] | .calls - .canceled'
}

if [ -z "$RPS" ]; then
	"${client_pin[@]}" "$GHZ" "${ghz_common[@]}" -c 4 -z 10s -O json "$ADDR" >"$OUT/capacity.json"
	capacity=$(jq '(.statusCodeDistribution.OK // 0) / (.total / 1e9) | floor' "$OUT/capacity.json")
	RPS=$((capacity * FACTOR))
	echo "soak: capacity ${capacity} Allocate/s (closed loop, 4 in flight)"
fi

# Fill the order memory at capacity (closed loop) so that the overload runs
# with it full: under a 10x overload a CPU-bound service applies too few
# orders per second to fill it within a few minutes.
if [ "$PREFILL" -gt 0 ]; then
	echo prefill >"$OUT/phase"
	echo "soak: prefill: until $PREFILL orders are applied (closed loop, 4 in flight)"
	while [ "$(orders)" -lt "$PREFILL" ]; do
		before=$(orders)
		"${client_pin[@]}" "$GHZ" "${ghz_common[@]}" -c 4 -z 20s -O json "$ADDR" >"$OUT/prefill.json"
		if [ "$(orders)" -eq "$before" ]; then
			echo "soak: prefill: no order applied in 20s; the server refuses everything:" >&2
			jq -c '.statusCodeDistribution' "$OUT/prefill.json" >&2
			curl -sf "http://$METRICS/metrics" | grep '^levee_decisions_total' >&2
			exit 1
		fi
	done
fi

# The overload runs as a series of CHUNK-second ghz runs: one ghz keeps
# every result in memory and, on a loaded machine, falls ever further
# behind its rate as they pile up. Each run's order ids carry its number
# (cheaper for ghz than a UUID per call), so every call is a new order.
echo overload >"$OUT/phase"
echo "soak: overload: ${RPS}/s open loop for $DURATION, in runs of ${CHUNK}s"
case $DURATION in
*m) secs=$((${DURATION%m} * 60)) ;;
*s) secs=${DURATION%s} ;;
*) secs=$DURATION ;;
esac
end=$(($(date +%s) + secs))
run=0
while [ "$(date +%s)" -lt "$end" ]; do
	z=$((end - $(date +%s)))
	[ "$z" -gt "$CHUNK" ] && z=$CHUNK
	"${client_pin[@]}" "$GHZ" --insecure --proto "$PROTO" --call "$CALL" \
		-d '{"sku":"SKU-0001","quantity":1,"order_id":"ov'"$run"'-{{.RequestNumber}}"}' \
		--timeout "$TIMEOUT" --connections 4 --async --rps "$RPS" -c 50 -z "${z}s" -O json "$ADDR" \
		>"$OUT/overload.json" 2>>"$OUT/ghz.err" &
	ghz_pid=$!
	wait "$ghz_pid" || true
	ghz_pid=
	jq -c '{count, total, statusCodeDistribution}' "$OUT/overload.json" >>"$OUT/overload-runs.jsonl" || true
	run=$((run + 1))
done
rm -f "$OUT/overload.json"
sleep "$INTERVAL"
kill "$sampler" 2>/dev/null || true
wait "$sampler" 2>/dev/null || true

jq -rs '"ghz: \(map(.count) | add) calls in \(length) runs, \((map(.count) | add) / (map(.total) | add) * 1e9 | floor)/s sent; codes \(map(.statusCodeDistribution | to_entries) | add | group_by(.key) | map({(.[0].key): (map(.value) | add)}) | add)"' \
	"$OUT/overload-runs.jsonl" || true

# Orders remembered: every Allocate the service ran and did not cancel
# applied one new order id, until ORDERS of them are remembered.
awk -F, -v orders="$ORDERS" '
function mm(k, v) { if (!(k "min" in a) || v < a[k "min"]) a[k "min"] = v; if (v > a[k "max"]) a[k "max"] = v }
NR == 1 { next }
{
	n++; mm("g", $2); mm("r", $3)
	if (!filled && $4 - $5 >= orders) { filled = $1; rfill = $3 }
	if (filled) { mm("fg", $2); mm("fr", $3) }
	if ($6 == "overload") { if (!ot) ot = $1; mm("og", $2); mm("or", $3) }
	if ($6 == "prefill" && $4 - $5 >= 1.5 * orders) { if (!ct) ct = $1; mm("cg", $2); mm("cr", $3) }
	last = $3; lt = $1; lorders = $4 - $5
}
END {
	printf "soak: %d samples over %ds\n", n, lt
	printf "soak: whole run: goroutines %d-%d, RSS %.1f-%.1f MB, last %.1f MB\n", a["gmin"], a["gmax"], a["rmin"]/1024, a["rmax"]/1024, last/1024
	if (filled) {
		printf "soak: order memory (%d) full at t=%ds (RSS %.1f MB); from then on: goroutines %d-%d, RSS %.1f-%.1f MB\n", orders, filled, rfill/1024, a["fgmin"], a["fgmax"], a["frmin"]/1024, a["frmax"]/1024
	} else {
		printf "soak: order memory not full by the end (%d of %d orders applied)\n", lorders, orders
	}
	if (ct) printf "soak: prefill once %d orders had been applied (from t=%ds, the memory churning): goroutines %d-%d, RSS %.1f-%.1f MB\n", 1.5 * orders, ct, a["cgmin"], a["cgmax"], a["crmin"]/1024, a["crmax"]/1024
	if (ot) printf "soak: overload phase (from t=%ds): goroutines %d-%d, RSS %.1f-%.1f MB\n", ot, a["ogmin"], a["ogmax"], a["ormin"]/1024, a["ormax"]/1024
}' "$OUT/samples.csv" | tee "$OUT/summary.txt"
echo "soak: samples in $OUT/samples.csv"
