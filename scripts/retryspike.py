#!/usr/bin/env python3
"""retryspike.py: what a Python grpcio client with a standard retry policy
(up to 3 attempts on RESOURCE_EXHAUSTED, from the service config) sends
into a server in a 10x open-loop spike. The Go twin is scripts/retryspike.

    levee serve -cpu 0 -addr 127.0.0.1:50061 -metrics-addr 127.0.0.1:9461 &
    taskset -c 1 /usr/bin/python3 scripts/retryspike.py --capacity 166

Needs Debian's python3-grpcio and python3-grpc-tools (the stubs are
generated into a temporary folder at start). It counts the attempts the
server saw from levee's decision metrics. A measuring tool: nothing it
prints is asserted.
"""
import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

import grpc

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROTO = os.path.join(ROOT, "examples", "inventory", "proto")


def stubs():
    out = tempfile.mkdtemp(prefix="retryspike-")
    subprocess.run([sys.executable, "-m", "grpc_tools.protoc", "-I", PROTO, "--python_out=" + out,
                    "--grpc_python_out=" + out, "corecart/inventory/v1/inventory.proto"], check=True, cwd=PROTO)
    sys.path.insert(0, out)
    from corecart.inventory.v1 import inventory_pb2, inventory_pb2_grpc
    return inventory_pb2, inventory_pb2_grpc


def attempts_seen(url):
    if not url:
        return -1
    total = 0.0
    with urllib.request.urlopen(url) as r:
        for line in r.read().decode().splitlines():
            if line.startswith("levee_decisions_total{") and 'guard="deadline"' in line:
                total += float(line.split()[-1])
    return total


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--target", default="127.0.0.1:50061")
    ap.add_argument("--metrics", default="http://127.0.0.1:9461/metrics")
    ap.add_argument("--capacity", type=float, required=True, help="server capacity in calls/s")
    ap.add_argument("--attempts", type=int, default=3)
    ap.add_argument("--spike", type=float, default=10.0, help="seconds of 10x load")
    a = ap.parse_args()
    pb, pbg = stubs()
    config = {"methodConfig": [{"name": [{"service": "corecart.inventory.v1.InventoryService"}],
                                "retryPolicy": {"maxAttempts": a.attempts, "initialBackoff": "0.1s", "maxBackoff": "1s",
                                                "backoffMultiplier": 2, "retryableStatusCodes": ["RESOURCE_EXHAUSTED"]}}]}
    ch = grpc.insecure_channel(a.target, options=[("grpc.enable_retries", 1), ("grpc.service_config", json.dumps(config))])
    stub = pbg.InventoryServiceStub(ch)
    skus = ["SKU-%04d" % i for i in range(1, 9)]
    lock = threading.Lock()
    codes = {}
    done = threading.Semaphore(0)
    rate = 10 * a.capacity

    def finished(fut):
        code = fut.code()
        with lock:
            codes[code.name] = codes.get(code.name, 0) + 1
        done.release()

    before = attempts_seen(a.metrics)
    start = time.monotonic()
    nxt, n = start, 0
    while nxt - start < a.spike:
        delay = nxt - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        nxt += random.expovariate(rate)
        n += 1
        req = pb.AllocateRequest(sku=skus[n % len(skus)], quantity=1, order_id="py%d" % n)
        stub.Allocate.future(req, timeout=1.0).add_done_callback(finished)
    for _ in range(n):
        done.acquire()
    after = attempts_seen(a.metrics)
    ok = codes.get("OK", 0)
    print("spike: %d calls in %.0fs at %.0f/s (sent %.0f/s); ok %d (%.0f%% of capacity), codes %s" % (
        n, a.spike, rate, n / a.spike, ok, 100 * ok / (a.capacity * a.spike), codes))
    if before >= 0 and after >= 0:
        print("attempts the server saw: %.0f, %.2f per call" % (after - before, (after - before) / n))


if __name__ == "__main__":
    main()
