#!/usr/bin/env bash
# msgbench's http system over HTTP/2 (http.version = "2") against h2load (nghttp2's load
# client, Debian's nghttp2-client, installed by scripts/setup.sh), in one invocation,
# alternating runs: one nginx (one worker, `listen ... http2`: cleartext HTTP/2 with prior
# knowledge, started here on a free loopback port with a generated configuration), 4
# connections x 64 concurrent streams, GET of a small static file, as fast as it answers
# (msgbench closed loop, one client thread, which runs the caller and its connections; h2load
# -c4 -m64, one thread). Prints the median of ROUNDS rounds (default 5) of requests/s and client
# CPU per request (whole process, from getrusage of the child: start-up and the report included)
# and the ratios; the targets are requests/s >= 1.0x h2load's and client CPU per request <=
# 0.8x. msgbench runs on its default client for cleartext HTTP/2 (its own); each round also runs
# it with http.client = "h2" (the h2 crate's client, which https and streaming calls use),
# so the two clients are compared too. nginx's own CPU per request under each client is printed
# (from /proc): a client can make the server it measures cheaper or dearer. WINDOW=256 sets the
# streams per connection.
source "$(dirname "$0")/common.sh"
ROUNDS=${ROUNDS:-5}
bash "$ROOT/scripts/setup.sh"
build_all
machine
WORK=$(mktemp -d)
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done; rm -rf "$WORK"; }
trap cleanup EXIT
PORT=$(free_port)
start_nginx "$WORK" "$PORT" http2
NGINX_PID=${PIDS[-1]}

python3 - "$MSGBENCH" "$OUT" "$PORT" "$ROUNDS" "$NGINX_PID" <<'PY'
import json, os, re, resource, statistics, subprocess, sys
msgbench, out, port, rounds, nginx_pid = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5]
SECONDS, CONNECTIONS, STREAMS = 3, 4, int(__import__('os').environ.get('WINDOW', '64'))

def child_cpu():
    u = resource.getrusage(resource.RUSAGE_CHILDREN)
    return u.ru_utime + u.ru_stime

def child_user():
    return resource.getrusage(resource.RUSAGE_CHILDREN).ru_utime

def nginx_cpu():
    fields = open(f"/proc/{nginx_pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

def measured(run):
    """Runs `run` (which returns requests done); its requests/s, CPU per request, user-space
    CPU per request, and nginx's CPU per request meanwhile."""
    before, user, server = child_cpu(), child_user(), nginx_cpu()
    done, seconds = run()
    cpu, user, server = child_cpu() - before, child_user() - user, nginx_cpu() - server
    return done / seconds, cpu / done, user / done, server / done

def h2load():
    text = subprocess.run(["h2load", "-c", str(CONNECTIONS), "-m", str(STREAMS), "-D", str(SECONDS),
                           f"http://127.0.0.1:{port}/small.txt"], capture_output=True, text=True, check=True).stdout
    done = int(re.search(r"requests: \d+ total, \d+ started, (\d+) done, (\d+) succeeded", text).group(2))
    return done, SECONDS

def ours(client=None):
    env = dict(os.environ)
    args = [msgbench, "run", "--quiet", "--json", "--out", out, "--duration", f"{SECONDS}s", "--warmup", "0",
            "--set", 'system="http"', "--set", "sweep={}", "--set", f'http.url="http://127.0.0.1:{port}"',
            "--set", 'http.version="2"', "--set", 'http.requests={ get = { path = "/small.txt" } }',
            "--set", 'pacing.mode="closed-loop"', "--set", f"client.connections={CONNECTIONS}",
            "--set", f"client.window={STREAMS}", "--set", f'http.client="{client or "msgbench"}"']
    r = json.loads(subprocess.run(args, capture_output=True, text=True, check=True, env=env).stdout)["runs"][0]
    c = r["counters"]
    assert c["delivered"] > 0 and c["failed"] == 0, (c, r["faults"])
    return c["delivered"], r["duration_s"]

print(f"nginx over HTTP/2 (h2c), GET /small.txt, {CONNECTIONS} connections x {STREAMS} streams, {SECONDS} s per run")
clients = {"msgbench": lambda: ours(), "h2load": h2load, "msgbench on the h2 crate": lambda: ours("h2")}
rows = {name: [] for name in clients}
for _ in range(rounds):
    for name, run in clients.items():
        rows[name].append(measured(run))
    print("   round: " + "; ".join(
        f"{name} {rps/1e3:.1f}k/s {cpu*1e9:.0f} ns CPU/req ({user*1e9:.0f} user), nginx {server*1e9:.0f} ns/req"
        for name, (rps, cpu, user, server) in ((n, rows[n][-1]) for n in clients)))
rounds_of = lambda xs: ", ".join(f"{x:.2f}" for x in xs)
def against_h2load(name, i):
    return [a[i] / b[i] for a, b in zip(rows[name], rows["h2load"])]
for name in ("msgbench", "msgbench on the h2 crate"):
    label = "msgbench" if name == "msgbench" else 'msgbench on the h2 crate (http.client = "h2")'
    tr, cr = against_h2load(name, 0), against_h2load(name, 1)
    ur = against_h2load(name, 2)
    kr = [(a[1] - a[2]) / (b[1] - b[2]) for a, b in zip(rows[name], rows["h2load"])]
    print(f"   {label}/h2load:")
    print(f"      throughput: median {statistics.median(tr):.2f} (rounds {rounds_of(tr)}); target >= 1.00")
    print(f"      client CPU per request: median {statistics.median(cr):.2f} (rounds {rounds_of(cr)}); target <= 0.80")
    print(f"         of which user space: median {statistics.median(ur):.2f} (rounds {rounds_of(ur)}); kernel: median {statistics.median(kr):.2f} (rounds {rounds_of(kr)})")
for name in clients:
    print(f"   nginx's CPU per request serving {name}: median {statistics.median(r[3] for r in rows[name])*1e9:.0f} ns")
PY
