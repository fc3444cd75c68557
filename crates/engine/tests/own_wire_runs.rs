//! The `wire` system against servers of protocols msgbench has never seen, written here in
//! Python and run unmodified, each measured from its scenario alone: a length-prefixed binary
//! echo server (ids and a status byte at offsets, stalls injected: latency from the intended
//! send time follows the model; pipelining at window 16), a newline-delimited JSON server that
//! answers out of order and sends replies with ids nobody asked for (counted, not fatal), a
//! fixed-size one, and servers that send garbage (one clear error per connection, counted).
mod common;

use common::{assert_accounted, run, stopped_by_protocol_error};
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};

/// A Python server: the script reads `PORT_FILE`-free arguments, listens on a free loopback
/// port and prints it; stopped by PID when dropped.
struct PyServer {
    child: Child,
    port: u16,
}

impl PyServer {
    fn start(script: &str, args: &[&str]) -> PyServer {
        let mut child = Command::new("python3")
            .arg("-c")
            .arg(script)
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start python3: {e} (run `bash scripts/setup.sh`)"));
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let port = line
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("no port: {line:?}"));
        PyServer { child, port }
    }

    fn address(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }
}

impl Drop for PyServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The shared start of every server: asyncio on a free port, the port printed.
const SERVE: &str = r#"
import asyncio, json, struct, sys, time
def serve(handle):
    async def main():
        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        print(server.sockets[0].getsockname()[1], flush=True)
        async with server:
            await server.serve_forever()
    asyncio.run(main())
"#;

/// Frames: u32 big-endian length of what follows | u64 id | payload. Replies: the same length
/// field | the id | a status byte (1 when the payload starts with 0xEE, else 0) | the payload.
/// Stalls: from its start, every `every_s` the server holds every reply for `stall_s`.
/// Writes the most requests one connection had unanswered to argv[3].
const LENGTH_ECHO: &str = r#"
every, stall, report = float(sys.argv[1]), float(sys.argv[2]), sys.argv[3]
t0 = time.monotonic()
most = 0
async def handle(reader, writer):
    global most
    loop = asyncio.get_running_loop()
    waiting = 0
    def answer(reply):
        nonlocal waiting
        waiting -= 1
        writer.write(reply)
    while True:
        try:
            head = await reader.readexactly(4)
            body = await reader.readexactly(struct.unpack(">I", head)[0])
        except Exception:
            return
        rid, payload = body[:8], body[8:]
        status = b"\x01" if payload[:1] == b"\xee" else b"\x00"
        reply = struct.pack(">I", 9 + len(payload)) + rid + status + payload
        waiting += 1
        if waiting > most:
            most = waiting
            open(report, "w").write(str(most))
        phase = (time.monotonic() - t0) % every if every > 0 else stall
        delay = stall - phase if phase < stall else 0.001
        loop.call_later(delay, answer, reply)
serve(handle)
"#;

fn length_echo(every_s: &str, stall_s: &str, report: &Path) -> PyServer {
    let script = format!("{SERVE}{LENGTH_ECHO}");
    PyServer::start(&script, &[every_s, stall_s, report.to_str().unwrap()])
}

/// The scenario of the length-prefixed echo server: two classes, `ok` and `bad` (whose
/// payload starts with 0xEE: status 1), ids matched at offset 4, status at offset 12.
fn length_scenario(address: &str, pacing: &str, client: &str) -> String {
    format!(
        r#"system = "wire"
[run]
duration = "4s"
warmup = "1s"
{pacing}
{client}
[wire]
address = "{address}"
[wire.framing]
kind = "length"
bytes = 4
[wire.match]
by = "id"
offset = 4
bytes = 8
[wire.status]
offset = 12
ok = [0]
[wire.requests.ok]
weight = 9
hex = "{{len}} {{id}} 00 {{intended_ns:u64be}} {{pad}}"
size = 64
[wire.requests.bad]
hex = "{{len}} {{id}} ee"
"#
    )
}

#[test]
fn a_length_prefixed_server_s_stalls_reach_every_request_due_during_them_as_the_model_says() {
    // As the HTTP test of the same name: 500 ms stalls every 2 s, 2000 requests/s open loop
    // over 10 connections; a quarter of the requests are due during a stall and wait for its
    // end, so quantile q > 0.75 is 500 ms × (q − 0.75) / 0.25.
    let dir = tempfile::tempdir().unwrap();
    let server = length_echo("2", "0.5", &dir.path().join("most"));
    let toml = length_scenario(
        &server.address(),
        "[pacing]\nmode = \"rate\"\nper_sec = 2000",
        "[client]\nconnections = 10\nwindow = 512\n",
    );
    let r = &run(&toml, &[])[0];
    assert_accounted(r);
    let class = |name: &str| r.classes.iter().find(|c| c.name == name).unwrap();
    // Every `bad` request failed on its status (counted by it, the warm-up's too), a tenth of
    // the requests; nothing else failed.
    assert_eq!(class("bad").latency.count, 0);
    let failed = r.counters.failed as f64 / (r.counters.failed + r.counters.delivered) as f64;
    assert!((0.08..0.12).contains(&failed), "{:?}", r.counters);
    assert!(
        r.faults.server_errors >= r.counters.failed,
        "{:?}",
        r.faults
    );
    assert_eq!(r.faults.errors[0].message, "status 1");
    assert_eq!(r.faults.protocol_errors + r.faults.unmatched_replies, 0);
    let model = |q: f64| 500e6 * (q - 0.75) / 0.25;
    // The `ok` class alone: 90 % of the requests, as evenly spread over the stalls.
    let ok = &class("ok").latency;
    for (name, measured, q) in [
        ("p90", ok.p90_ns, 0.9),
        ("p99", ok.p99_ns, 0.99),
        ("p99.9", ok.p999_ns, 0.999),
    ] {
        let ratio = measured as f64 / model(q);
        assert!(
            (0.9..1.1).contains(&ratio),
            "{name}: measured {measured} ns, model {:.0} ns ({ratio:.3}x)",
            model(q)
        );
    }
}

#[test]
fn a_length_prefixed_server_is_pipelined_to_the_window() {
    let dir = tempfile::tempdir().unwrap();
    let most = dir.path().join("most");
    // No stall: every reply 1 ms after its request, so a closed loop keeps 16 in flight.
    let server = length_echo("0", "0.001", &most);
    let toml = length_scenario(
        &server.address(),
        "[pacing]\nmode = \"closed-loop\"",
        "[client]\nconnections = 2\nwindow = 16\n",
    );
    let r = &run(&toml, &["run.duration=\"1s\"", "run.warmup=\"200ms\""])[0];
    assert_accounted(r);
    assert!(r.counters.delivered > 1000, "{:?}", r.counters);
    let most: u32 = std::fs::read_to_string(&most).unwrap().parse().unwrap();
    assert_eq!(most, 16, "requests one connection had unanswered at once");
}

/// Newline-delimited JSON: `{"id": N, "op": OP, "key": K}` → `{"id": N, "value": K}`, or
/// `{"id": N, "error": {...}}` for op `fail`. Every two requests of a connection are answered
/// in reverse order (the second first), and every 50th reply is followed by one with an id no
/// request had (the count written to argv[1]).
const JSON_LINES: &str = r#"
report = sys.argv[1]
strays = 0
async def handle(reader, writer):
    global strays
    held, n = None, 0
    while True:
        line = await reader.readline()
        if not line:
            return
        req = json.loads(line)
        if req["op"] == "fail":
            reply = {"id": req["id"], "error": {"code": -1, "message": "no"}}
        else:
            reply = {"value": req["key"], "id": req["id"]}
        out = json.dumps(reply).encode() + b"\n"
        n += 1
        if n % 50 == 0:
            out += b'{"id": 987654321, "error": {"code": 7}}\n'
            strays += 1
            open(report, "w").write(str(strays))
        if held is None and n % 2 == 1:
            held = out
            # An odd one alone is answered when nothing follows it soon.
            async def flush():
                nonlocal held
                await asyncio.sleep(0.002)
                if held is not None:
                    writer.write(held)
                    held = None
            asyncio.ensure_future(flush())
            continue
        writer.write(out + (held or b""))
        held = None
serve(handle)
"#;

#[test]
fn a_json_lines_server_is_matched_by_id_out_of_order_and_its_strays_are_counted() {
    let dir = tempfile::tempdir().unwrap();
    let strays = dir.path().join("strays");
    let script = format!("{SERVE}{JSON_LINES}");
    let server = PyServer::start(&script, &[strays.to_str().unwrap()]);
    let toml = format!(
        r#"system = "wire"
[run]
duration = "2s"
warmup = "200ms"
[pacing]
mode = "rate"
per_sec = 2000
[client]
connections = 2
window = 16
[wire]
address = "{}"
keys = 1000
key_pattern = "zipf"
[wire.framing]
kind = "delimiter"
delimiter = "\n"
[wire.match]
by = "json"
path = "id"
[wire.status]
path = "error"
[wire.requests.get]
weight = 9
text = "{{\"id\": {{id}}, \"op\": \"get\", \"key\": {{key}}}}\n"
[wire.requests.fail]
text = "{{\"id\": {{id}}, \"op\": \"fail\", \"key\": {{seq}}}}\n"
"#,
        server.address()
    );
    let r = &run(&toml, &[])[0];
    drop(server);
    assert_accounted(r);
    assert_eq!(r.counters.in_flight_end, 0, "{:?}", r.counters);
    let class = |name: &str| r.classes.iter().find(|c| c.name == name).unwrap();
    assert!(class("get").latency.count > 2000, "{:?}", r.counters);
    assert_eq!(class("fail").latency.count, 0);
    let failed = r.counters.failed as f64 / (r.counters.failed + r.counters.delivered) as f64;
    assert!((0.07..0.13).contains(&failed), "{:?}", r.counters);
    assert!(
        r.faults.server_errors >= r.counters.failed,
        "{:?}",
        r.faults
    );
    assert_eq!(r.faults.errors[0].message, "an error member");
    // A stray's own error member is no request's failure.
    let counted: u64 = r.faults.errors.iter().map(|e| e.count).sum();
    assert_eq!(counted, r.faults.server_errors, "{:?}", r.faults);
    assert_eq!(
        r.faults.protocol_errors + r.faults.disconnects,
        0,
        "{:?}",
        r.faults
    );
    // Strays sent after the run's end were never read: at most the ones written.
    let sent: u64 = std::fs::read_to_string(&strays).unwrap().parse().unwrap();
    let seen = r.faults.unmatched_replies;
    assert!(
        seen > 0 && seen <= sent && sent - seen <= 2,
        "seen {seen} of {sent}"
    );
}

/// Every reply 32 bytes, in order: `OK` and 30 bytes of the request's first line.
const FIXED: &str = r#"
async def handle(reader, writer):
    while True:
        line = await reader.readline()
        if not line:
            return
        writer.write((b"OK" + line.rstrip(b"\n") + b" " * 30)[:32])
serve(handle)
"#;

#[test]
fn a_fixed_size_reply_in_order_with_text_requests_padded_to_their_size() {
    let server = PyServer::start(&format!("{SERVE}{FIXED}"), &[]);
    let toml = format!(
        "system = \"wire\"\n[run]\nduration = \"1s\"\nwarmup = \"100ms\"\n[pacing]\nmode = \"rate\"\nper_sec = 2000\n[client]\nconnections = 2\nwindow = 8\n[wire]\naddress = \"{}\"\n[wire.framing]\nkind = \"fixed\"\nsize = 32\n[wire.requests.put]\ntext = \"PUT {{seq}} {{random}}{{pad}}\\n\"\nsize = 100\n",
        server.address()
    );
    let r = &run(&toml, &[])[0];
    assert_accounted(r);
    assert!(r.counters.delivered > 1500, "{:?}", r.counters);
    assert_eq!(r.counters.failed, 0, "{:?}", r.faults);
}

/// A line protocol: `GET <n>\n` → `OK <n>\n`, or `ERR no such key\n` when n ends in 7.
const LINES: &str = r#"
async def handle(reader, writer):
    while True:
        line = await reader.readline()
        if not line:
            return
        n = line.split()[1]
        writer.write(b"ERR no such key\n" if n.endswith(b"7") else b"OK " + n + b"\n")
serve(handle)
"#;

#[test]
fn a_line_protocol_s_text_status_fails_the_replies_that_start_with_it() {
    let server = PyServer::start(&format!("{SERVE}{LINES}"), &[]);
    let toml = format!(
        "system = \"wire\"\n[run]\nduration = \"1s\"\nwarmup = \"0s\"\n[pacing]\nmode = \"rate\"\nper_sec = 2000\n[client]\nconnections = 2\nwindow = 8\n[wire]\naddress = \"{}\"\n[wire.framing]\nkind = \"delimiter\"\ndelimiter = \"\\n\"\n[wire.status]\nfails_with = [\"ERR\"]\n[wire.requests.get]\ntext = \"GET {{seq}}\\n\"\n",
        server.address()
    );
    let r = &run(&toml, &[])[0];
    assert_accounted(r);
    // {seq} counts over the whole run: every tenth ends in 7.
    let failed = r.counters.failed as f64 / r.counters.sent as f64;
    assert!((0.09..0.11).contains(&failed), "{:?}", r.counters);
    assert_eq!(r.faults.errors[0].message, "ERR no such key");
    assert_eq!(r.faults.errors[0].count, r.faults.server_errors);
}

/// Answers every read with `argv[1]` (hex) repeated `argv[2]` times, and nothing else.
const GARBAGE: &str = r#"
junk = bytes.fromhex(sys.argv[1]) * int(sys.argv[2])
async def handle(reader, writer):
    while True:
        if not await reader.read(4096):
            return
        writer.write(junk)
serve(handle)
"#;

#[test]
fn garbage_replies_are_one_clear_error_per_connection_and_bounded() {
    // A length field of 4 GiB: refused at once, not waited for.
    let server = PyServer::start(&format!("{SERVE}{GARBAGE}"), &["ffffffff00", "1"]);
    let toml = format!(
        "system = \"wire\"\n[run]\nduration = \"500ms\"\nwarmup = \"0s\"\n[pacing]\nmode = \"rate\"\nper_sec = 1000\n[client]\nconnections = 2\non_error = \"reconnect\"\n[wire]\naddress = \"{}\"\n[wire.framing]\nkind = \"length\"\n[wire.requests.a]\nhex = \"{{len}} 01\"\n",
        server.address()
    );
    let r = &run(&toml, &[])[0];
    assert_accounted(r);
    assert!(r.faults.protocol_errors >= 2, "{:?}", r.faults);
    assert_eq!(r.counters.delivered, 0);
    // Sends that waited for their connection to reopen are late by the system, not the host.
    assert!(
        !r.warnings
            .iter()
            .any(|w| w.to_string().contains("host's lateness, not")),
        "{:?}",
        r.warnings
    );
    // No stop message says why: the result does.
    let first = r.faults.first_protocol_error.as_deref().unwrap_or_default();
    assert!(first.contains("length field says 4294967295"), "{first}");
    // Stopped at the first: the message says what and how to fix it.
    let r = &run(&toml, &["client.on_error=\"stop\""])[0];
    stopped_by_protocol_error(r, "length field says 4294967295");
    stopped_by_protocol_error(r, "[wire.framing]");
    // No delimiter ever: the reply is given up at max_reply, never held in memory beyond it.
    let endless = PyServer::start(&format!("{SERVE}{GARBAGE}"), &["78", "100000"]);
    let toml = format!(
        "system = \"wire\"\n[run]\nduration = \"500ms\"\nwarmup = \"0s\"\n[pacing]\nmode = \"rate\"\nper_sec = 1000\n[wire]\naddress = \"{}\"\nmax_reply = 65536\n[wire.framing]\nkind = \"delimiter\"\ndelimiter = \"\\n\"\n[wire.requests.a]\ntext = \"x\\n\"\n",
        endless.address()
    );
    stopped_by_protocol_error(&run(&toml, &[])[0], "no delimiter within 65536 bytes");
    // A length field that is wrong within max_reply (a little-endian server read big-endian):
    // the reply never ends, and the timeout says what the connection holds.
    let wrong = PyServer::start(&format!("{SERVE}{GARBAGE}"), &["0000100001", "1"]);
    let toml = format!(
        "system = \"wire\"\n[run]\nduration = \"1s\"\nwarmup = \"0s\"\n[pacing]\nmode = \"rate\"\nper_sec = 100\n[client]\ntimeout = \"200ms\"\n[wire]\naddress = \"{}\"\n[wire.framing]\nkind = \"length\"\n[wire.requests.a]\nhex = \"{{len}} 01\"\n",
        wrong.address()
    );
    let r = &run(&toml, &[])[0];
    assert!(r.faults.timeouts >= 1, "{:?}", r.faults);
    let why = "while the connection held 5 bytes of a reply whose length field says 4096";
    assert!(
        (r.warnings.iter()).any(|w| w.is_stopped_early() && w.to_string().contains(why)),
        "{:?}",
        r.warnings
    );
}

#[test]
fn the_example_s_key_value_server_is_measured_with_narrow_ids_from_its_scenario_alone() {
    // examples/own-protocol.toml as written (its server started by its [sut]), on a free
    // port: 4-byte ids, 16 deep on 4 connections — every request answered and matched.
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let port = common::free_port().to_string();
    let toml = std::fs::read_to_string(root.join("examples/own-protocol.toml"))
        .unwrap()
        .replace("9102", &port)
        .replace(
            "examples/own-protocol/kvd.py",
            root.join("examples/own-protocol/kvd.py").to_str().unwrap(),
        );
    let r = &run(&toml, &["run.duration=\"1s\"", "run.warmup=\"200ms\""])[0];
    assert_accounted(r);
    assert!(r.counters.delivered > 1500, "{:?}", r.counters);
    assert_eq!(r.counters.delivered, r.counters.sent, "{:?}", r.faults);
    assert_eq!(
        r.faults.total() + r.faults.unmatched_replies,
        0,
        "{:?}",
        r.faults
    );
    assert_eq!(r.classes.len(), 2);
}
