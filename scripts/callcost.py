#!/usr/bin/env python3
"""callcost.py: what protect's BenchmarkCallCost measured, the preset
against unprotected.

    scripts/callcost.py bench OUTPUT...

reads the output of `go test -bench CallCost ./protect` (any -count; each
file a column, "before" and "after" say) and prints, for each GOMAXPROCS
and load, the medians of the server's CPU, kernel CPU and write system
calls per call of each mode, and the preset's ratio to unprotected (the
median of each run's ratio): the figures docs/cost.md gives.

    scripts/callcost.py callgrind FOLDER

prints instructions per call counted by callgrind, by where they go:

    go test -c -o /tmp/protect.test ./protect
    mkdir -p /tmp/cg && rm -f /tmp/cg/*
    LEVEE_COST_WRAP="valgrind --tool=callgrind --callgrind-out-file=/tmp/cg/cg.%p" \
        /tmp/protect.test -test.run '^$' -test.bench 'CallCost/procs=1/callers=1/' -test.benchtime 2000x
    scripts/callcost.py callgrind /tmp/cg

Under LEVEE_COST_WRAP the benchmark zeroes each server's counts before its
measured calls and dumps them after, naming the benchmark and its calls in
the dump's trigger (NAME@N); this reads every dump in the folder and prints,
for each load, each mode's instructions per call (user space only: callgrind
does not see the kernel) and, for the preset, the difference by group of
functions (levee's own code, allocation, the garbage collector, the
scheduler, ...) and the functions that differ most. Counts of instructions
hardly move with the machine's load, unlike CPU time; but callgrind runs
the server about fifty times slower and one thread at a time, so use loads
that do not saturate it (callers=1). Needs valgrind (callgrind_annotate).
A measuring tool: nothing it prints is asserted.
"""
import collections
import glob
import os
import re
import subprocess
import sys

GROUPS = [
    ("levee", r"levee-go/levee"),
    ("context", r"^context\."),
    ("stack growth", r"runtime\.(step|pcvalue|adjust|copystack|newstack|findfunc|funcMaxSPDelta|\(\*stkframe\)|\(\*unwinder\)|\(\*moduledata\)\.textAddr|readvarint|funcdata|funcInfo|morestack|getStackMap|pcdatavalue|funcspdelta)"),
    ("allocation", r"runtime\.(mallocgc|newobject|\(\*mspan\)|\(\*mcache\)|nextFree|memclr|makechan|makeslice|makemap|growslice|\(\*mcentral\)|heapSetType|writeHeapBits|\(\*mheap\)|\(\*pallocBits\)|publicationBarrier|deductAssist)"),
    ("garbage collector", r"runtime\.(scan|greyobject|findObject|gcDrain|markBits|gcAssist|tryDeferToSpanScan|typePointers|\(\*gcWork\)|spanOf|wbBuf|bulkBarrier|gcmark|markroot|sweep|\(\*sweepLocked\)|shade|\(\*spanInlineMarkBits\)|\(\*spanQueue\)|gcBgMark|gcStart|gcMark|wbBufFlush)"),
    ("scheduler, channels, timers", r"runtime\.(schedule|findRunnable|park|gopark|goready|ready|runq|execute|gogo|mcall|selectgo|sellock|selunlock|chansend|chanrecv|send|recv|lock2|unlock2|futex|notewake|notesleep|netpoll|casgstatus|wakep|startm|stopm|mPark|checkTimers|\(\*timer|\(\*timers\)|resetForSleep|gosched|goschedImpl|Gosched|runqput|globrunq|nanotime|entersyscall|exitsyscall|reentersyscall|newproc|gfget|gfput|goexit|malg|acquirep|releasep|resetspinning|injectglist|stealWork|checkIdle|handoffp|sysmon|usleep|osyield|procyield|mstart|\(\*waitq\)|acquireSudog|releaseSudog|selparkcommit|chanparkcommit|closechan|newTimer|stopTimer|resetTimer)|^time\.(NewTimer|\(\*Timer\))"),
    ("grpc-go, http2", r"grpc|golang\.org/x/net"),
    ("system calls", r"^syscall\.|internal/runtime/syscall|internal/poll|^net\.|^os\."),
]


THREAD_ENTRY = re.compile(r"^(clone|start_thread|threadentry|runtime\.mstart|runtime/cgo)")


def load(path):
    """Self instructions by function, and the total, of one dump."""
    out = subprocess.run(["callgrind_annotate", "--inclusive=no", "--auto=no", "--threshold=100", path],
                         capture_output=True, text=True, check=True).stdout
    funcs, total = collections.Counter(), 0
    for line in out.splitlines():
        m = re.match(r"\s*([\d,]+)\s+\(.*?\)\s+(.*)$", line)
        if not m:
            continue
        n, name = int(m.group(1).replace(",", "")), m.group(2)
        if "PROGRAM TOTALS" in name:
            total = n
            continue
        name = re.sub(r" \[.*\]$", "", name).split(":", 1)[-1]
        funcs[re.sub(r"'\d+$", "", name)] += n
    # Callgrind follows calls by their returns, and the runtime's
    # switches between goroutine stacks confuse it: now and then a
    # function is charged a large part of the program as its own (self
    # above 100% of the total, or a fifth of it; the threads' entry
    # points, which run nothing themselves). No function of these servers
    # spends a fifth of the program by itself (the most, the runtime's
    # stack walk, about 13%); leave those out. The totals are not
    # affected.
    funcs = collections.Counter({k: v for k, v in funcs.items()
                                 if v < total / 5 and not THREAD_ENTRY.search(k)})
    return total, funcs


def trigger(path):
    with open(path, errors="replace") as f:
        for line in f:
            if line.startswith("desc: Trigger:") or line.startswith("trigger:"):
                return line.split(":", 1 if line.startswith("trigger") else 2)[-1].strip()
    return ""


def group(name):
    return next((g for g, p in GROUPS if re.search(p, name)), "other")


def bench(paths):
    """Medians of BenchmarkCallCost's metrics, per file, and the ratios."""
    import statistics
    cols = []
    for path in paths:
        runs = collections.defaultdict(lambda: collections.defaultdict(list))
        for line in open(path):
            if not line.startswith("BenchmarkCallCost/"):
                continue
            f = line.split()
            parts = f[0].split("/")
            key = ("/".join(parts[1:-1]), re.sub(r"-\d+$", "", parts[-1]))
            for v, unit in zip(f[2::2], f[3::2]):
                runs[key][unit].append(float(v))
        cols.append(runs)
    keys = sorted({k[0] for runs in cols for k in runs})
    print("| GOMAXPROCS, load | file | runs | server CPU/call, unprotected (µs) | preset (µs) | ratio | calls/s ratio | kernel part, unprotected / preset (µs) | writes/call, unprotected / preset |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for ld in keys:
        for i, runs in enumerate(cols):
            u, p = runs.get((ld, "unprotected")), runs.get((ld, "preset"))
            if not u or not p:
                continue
            med = lambda r, unit: statistics.median(r[unit]) if r.get(unit) else float("nan")
            cu, cp = med(u, "server-cpu-ns/op"), med(p, "server-cpu-ns/op")
            # The ratio is the median of each run's: the two modes of a run
            # ran one after the other, and the machine's load drifts less
            # within a run than between runs.
            paired = statistics.median(b / a for a, b in zip(u["server-cpu-ns/op"], p["server-cpu-ns/op"]))
            # Closed loop: the preset's calls per second against
            # unprotected's (ns/op is the time per call at that
            # concurrency); "-" at a fixed rate, where it is the rate.
            rate = "-"
            if "rate=" not in ld:
                rate = f"{statistics.median(a / b for a, b in zip(u['ns/op'], p['ns/op'])):.2f}"
            print(f"| {ld} | {os.path.basename(paths[i])} | {len(p['server-cpu-ns/op'])} | {cu/1e3:.1f} | {cp/1e3:.1f} | {paired:.2f} | {rate} | "
                  f"{med(u, 'server-sys-ns/op')/1e3:.1f} / {med(p, 'server-sys-ns/op')/1e3:.1f} | "
                  f"{med(u, 'server-writes/op'):.2f} / {med(p, 'server-writes/op'):.2f} |")


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "bench":
        return bench(sys.argv[2:])
    if len(sys.argv) > 1 and sys.argv[1] == "callgrind":
        del sys.argv[1]
    folder = sys.argv[1] if len(sys.argv) > 1 else "."
    runs = {}  # (load, mode) -> (calls, total, funcs)
    for path in sorted(glob.glob(os.path.join(folder, "*"))):
        t = trigger(path)
        m = re.search(r"Client Request: (\S+)@(\d+)|(\S+)@(\d+)", t)
        if not m:
            continue
        name, calls = (m.group(1), m.group(2)) if m.group(1) else (m.group(3), m.group(4))
        calls = int(calls)
        parts = name.split("/")
        mode, ld = re.sub(r"-\d+$", "", parts[-1]), "/".join(parts[1:-1])
        total, funcs = load(path)
        if (ld, mode) not in runs or runs[(ld, mode)][0] < calls:
            runs[(ld, mode)] = (calls, total, funcs)
    for ld in sorted({k[0] for k in runs}):
        if (ld, "unprotected") not in runs or (ld, "preset") not in runs:
            continue
        nb, tb, b = runs[(ld, "unprotected")]
        nn, tn, a = runs[(ld, "preset")]
        print(f"## {ld}: instructions per call, unprotected {tb/nb:,.0f} ({nb} calls), preset {tn/nn:,.0f} ({nn} calls): ratio {tn/nn/(tb/nb):.3f}, +{tn/nn-tb/nb:,.0f}\n")
        groups = collections.defaultdict(lambda: [0.0, 0.0])
        for k in set(a) | set(b):
            g = groups[group(k)]
            g[0] += b.get(k, 0) / nb
            g[1] += a.get(k, 0) / nn
        print("| group | unprotected | preset | difference |\n|---|---:|---:|---:|")
        for g, (x, y) in sorted(groups.items(), key=lambda r: -(r[1][1] - r[1][0])):
            print(f"| {g} | {x:,.0f} | {y:,.0f} | {y-x:+,.0f} |")
        print("\n| function | unprotected | preset | difference |\n|---|---:|---:|---:|")
        diffs = sorted(((a.get(k, 0) / nn - b.get(k, 0) / nb, k) for k in set(a) | set(b)), key=lambda r: -abs(r[0]))
        for d, k in diffs[:int(os.environ.get("TOP", "25"))]:
            print(f"| {k} | {b.get(k, 0)/nb:,.0f} | {a.get(k, 0)/nn:,.0f} | {d:+,.0f} |")
        print()


if __name__ == "__main__":
    main()
