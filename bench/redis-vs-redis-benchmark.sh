#!/usr/bin/env bash
# msgbench's redis driver against redis-benchmark, against one local redis-server started
# here (port 6398, no persistence), alternating runs in one invocation: 50 connections,
# pipeline depth 1 and 16, PING (as RESP array, redis-benchmark's ping_mbulk), SET (3-byte
# value, one key, redis-benchmark's defaults), and commands given as arguments on 100 000 keys:
# HSET user:<key> name xxx and LPUSH list:<key> xxx (`redis-benchmark -r 100000 -- HSET …`),
# and GET on Zipf-distributed keys (exponent 0.99) next to redis-benchmark's uniform GET (it
# has no Zipf keys: the nearest peer). Prints per case the median of ROUNDS rounds (default 3)
# of requests/s and client CPU per request, and the ratios against issue 21's targets:
# throughput ≥ 1.2× redis-benchmark's, client CPU per request ≤ 0.5× redis-benchmark's.
# The SET rows also run the C floor (bench/floors/redis_pipeline.c: epoll, one send of the
# window's commands and one recv of their replies per batch, nothing parsed or timed) and print
# its CPU per request against redis-benchmark's (what the kernel's loopback TCP leaves possible)
# and msgbench's against it.
# Client CPU: redis-benchmark's is its whole process (getrusage of the child); msgbench's is
# its whole process too (warm-up 0, so startup, collector and drain are charged to it).
source "$(dirname "$0")/common.sh"
ROUNDS=${ROUNDS:-3}
bash "$ROOT/scripts/setup.sh"
build_all
machine
PORT=6398
redis-server --port $PORT --bind 127.0.0.1 --save '' --appendonly no >/dev/null 2>&1 &
REDIS_PID=$!
trap 'kill $REDIS_PID 2>/dev/null; wait $REDIS_PID 2>/dev/null' EXIT
for _ in $(seq 50); do redis-cli -p $PORT ping >/dev/null 2>&1 && break; sleep 0.1; done
python3 - "$MSGBENCH" "$OUT" "$PORT" "$ROUNDS" "$FLOORS/redis_pipeline" <<'PY'
import json, re, resource, statistics, subprocess, sys
msgbench, out, port, rounds, floor_bin = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5]

def child_cpu():
    u = resource.getrusage(resource.RUSAGE_CHILDREN)
    return u.ru_utime + u.ru_stime

def redis_benchmark(test, depth):
    """`test` is a -t name (ping_mbulk, set) or a command's arguments (with -r 100000)."""
    n = 150_000 if depth == 1 else 1_500_000
    what = ["-t", test] if isinstance(test, str) else ["-r", "100000", *test]
    before = child_cpu()
    text = subprocess.run(["redis-benchmark", "-p", port, "-c", "50", "-n", str(n), "-P", str(depth),
                           "--csv", *what], capture_output=True, text=True, check=True).stdout
    cpu = child_cpu() - before
    row = [l for l in text.splitlines() if l.startswith('"')][-1]
    rps = float(row.split(",")[1].strip('"'))
    return rps, cpu / n

def floor(depth):
    """requests/s, CPU-s per request of the C floor (SET, 50 connections, `depth` per batch)."""
    before = child_cpu()
    text = subprocess.run([floor_bin, "-p", port, "-c", "50", "-P", str(depth), "-d", "3"],
                          capture_output=True, text=True, check=True).stdout
    cpu = child_cpu() - before
    n, s = re.search(r"requests (\d+) seconds ([\d.]+)", text).groups()
    assert int(n) > 0, f"the C floor completed no request: {text}"
    return int(n) / float(s), cpu / int(n)

def ours(command, depth, keys):
    """`command` is ping/set or a TOML array of arguments; `keys` extra --set lines."""
    before = child_cpu()
    extra = [a for k in keys for a in ("--set", k)]
    text = subprocess.run([msgbench, "run", "--quiet", "--json", "--out", out, "--duration", "3s",
                           "--warmup", "0", "--set", 'system="redis"', "--set", "sweep={}",
                           "--set", f'redis.address="127.0.0.1:{port}"', "--set", 'pacing.mode="closed-loop"',
                           "--set", "client.connections=50", "--set", f"client.window={depth}",
                           "--set", f'redis.ops={{ op = {{ command = {command} }} }}', *extra],
                          capture_output=True, text=True, check=True).stdout
    cpu = child_cpu() - before
    r = json.loads(text)["runs"][0]
    c = r["counters"]
    assert c["delivered"] > 0 and c["failed"] == 0, c
    return c["delivered"] / r["duration_s"], cpu / c["delivered"]

space = ["redis.keys=100000"]
cases = [
    ("ping", '"ping"', [], "ping_mbulk"),
    ("set", '"set"', [], "set"),
    ("hset", '["HSET", "user:{key}", "name", "{data}"]', space, ["HSET", "user:__rand_int__", "name", "xxx"]),
    ("lpush", '["LPUSH", "list:{key}", "{data}"]', space, ["LPUSH", "list:__rand_int__", "xxx"]),
    ("get zipf", '["GET", "key:{key}"]', space + ['redis.key_pattern="zipf"'], ["GET", "key:__rand_int__"]),
]
print(f"{'case':<16}{'msgbench/s':>12}{'r-b/s':>12}{'ratio':>7}{'ns CPU/req':>12}{'r-b ns':>9}{'ratio':>7}"
      f"{'floor ns':>10}{'floor/r-b':>10}{'ours/floor':>11}")
for name, command, keys, test in cases:
    for depth in [1, 16]:
        tr, cr, fr, of = [], [], [], []
        f_cpu = None
        for _ in range(rounds):
            a_rps, a_cpu = ours(command, depth, keys)
            b_rps, b_cpu = redis_benchmark(test, depth)
            tr.append(a_rps / b_rps)
            cr.append(a_cpu / b_cpu)
            if name == "set":
                _, f_cpu = floor(depth)
                fr.append(f_cpu / b_cpu)
                of.append(a_cpu / f_cpu)
        line = (f"{name + ' -P ' + str(depth):<16}{a_rps/1e3:>11.0f}k{b_rps/1e3:>11.0f}k{statistics.median(tr):>7.2f}"
                f"{a_cpu*1e9:>12.0f}{b_cpu*1e9:>9.0f}{statistics.median(cr):>7.2f}")
        if f_cpu is not None:
            line += f"{f_cpu*1e9:>10.0f}{statistics.median(fr):>10.2f}{statistics.median(of):>11.2f}"
        print(line)
print("get zipf: redis-benchmark has no Zipf keys; its row is uniform GET on the same 100 000 keys")
print("ratios are medians over rounds (ns columns: the last round); targets: throughput >= 1.20, CPU per request <= 0.50")
PY
