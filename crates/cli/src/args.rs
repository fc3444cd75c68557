//! Command-line definition (clap derive; the doc comments are the `--help` text).
use clap::{Args, Parser, Subcommand};
use std::path::PathBuf;

/// Measure latency and throughput of message-passing systems, honestly: latency counted from the
/// intended send time, every message accounted for, results written as each run ends.
#[derive(Debug, Parser)]
#[command(
    name = "msgbench",
    version,
    propagate_version = true,
    arg_required_else_help = true,
    after_help = "Exit codes: 0 done; 1 a run failed or a file could not be written (what was measured \
                  is on disk), or `search` found the host, not the system, to be the limit; 2 bad input (nothing run or written); 3 a threshold failed (every \
                  result and report written); 4 compare's gate failed (--fail-on, \
                  --max-regression) or judged invalid runs; 5 a run delivered nothing, or \
                  (run --strict) every run is invalid (every result and report written); 130 interrupted by Ctrl-C (the current run is \
                  written). Limits of runs and servers: docs/limits.md."
)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run an experiment (a scenario file, or the embedded default) and write its results.
    ///
    /// Example: msgbench run examples/queue-capacity.toml --duration 2s --out results
    ///
    /// HTTP/2: --set 'http.client="h2"' measures cleartext unary HTTP/2 and gRPC on the h2
    /// crate's client instead of msgbench's own (docs/http2-grpc.md, "Which HTTP/2 client").
    Run(RunArgs),
    /// Measure an HTTP server in one line, as wrk2 or oha would: one point, no sweep, the same
    /// results directory and reports as `run`. With --rate, an open-loop schedule (latency from
    /// each request's intended send time, as wrk2); without, closed loop: every connection
    /// keeps --window requests in flight (as wrk; said in the output). --print-scenario prints
    /// the scenario file the flags stand for, to grow the one-liner into a file for `run`.
    ///
    /// Example: msgbench http http://127.0.0.1:8080/api/items --rate 1000 --connections 16 --duration 10s
    ///
    /// Example: msgbench http http://127.0.0.1:8080/orders -m POST -H 'Content-Type: application/json' -d '{"qty":1}' --print-scenario > orders.toml
    ///
    /// Example: msgbench http 'http://127.0.0.1:8080/items/{key}?n={seq}' --keys 100000 --key-pattern zipf --rate 5000
    ///
    /// Example: msgbench http http://127.0.0.1:8080 --requests-file targets.txt --rate 50000
    ///
    /// Example: msgbench http http://localhost/ --unix-socket /run/nginx.sock --rate 20000
    Http(HttpArgs),
    /// Measure a Redis server in one line, as redis-benchmark or memtier would: one point, the
    /// same results and reports as `run`; --rate for an open-loop schedule, else closed loop.
    ///
    /// Example: msgbench redis 127.0.0.1:6379 --rate 20000 --connections 8
    ///
    /// Example: msgbench redis 127.0.0.1:6379 --command 'SET k:{key} {data}' --keys 100000 --key-pattern zipf --value-bytes 512 --rate 5000
    ///
    /// Example: msgbench redis unix:///run/redis/redis.sock --rate 20000
    Redis(RedisLineArgs),
    /// Measure a gRPC method in one line, as ghz would: unary or server-streaming calls, the
    /// message from --data (JSON), the method described by --proto or the server's reflection.
    ///
    /// Example: msgbench grpc http://127.0.0.1:50051 --call msgbench.Echo/Call --proto protos/msgbench.proto -d '{"note":"hi"}' --rate 2000
    Grpc(GrpcLineArgs),
    /// Measure a JSON-RPC server over WebSocket in one line: one method, its params as JSON.
    ///
    /// Example: msgbench ws ws://127.0.0.1:8546 --method eth_blockNumber --rate 1000 -c 4
    Ws(WsLineArgs),
    /// Check a scenario file and list the runs it expands to, without running anything.
    ///
    /// Example: msgbench check examples/queue-capacity.toml --set run.replicates=1
    Check(ScenarioArgs),
    /// Write DIR/report.md, DIR/report.html and one SVG per chart from the results in DIR (a
    /// pure function of the files: nothing is re-run). `msgbench run` writes them too.
    ///
    /// Example: msgbench report results/pipeline-depth/20261122-010955 --slo "p99 < 5ms"
    Report(ReportArgs),
    /// Find the maximum sustainable rate under an SLO: ramp the open-loop rate ×2 until a step
    /// fails (SLO missed, < 99.9 % delivered, target not reached, or the driver late), then
    /// bisect to --precision. Every step is a full run; all go to one result directory whose
    /// report shows each step. A step that fails because msgbench's own sends were late while
    /// the system never pushed back (the host, not the system) is run again; late twice, the
    /// search stops there and exits 1: any rate found below it would be the host's.
    ///
    /// Example: msgbench search examples/rpc-capacity.toml --slo "p99 < 10ms"
    Search(SearchArgs),
    /// Compare two result directories: per metric the change from A to B, a confidence
    /// interval (Welch's t on the logs of the replicates, 95 % for a point's metrics together)
    /// and a verdict (improved, regressed, no significant change). A verdict needs 3 replicates
    /// on each side (run both with --replicates 3); with fewer, the change is shown without one.
    /// Sweep points are matched by their parameters; two single-point directories are compared
    /// directly.
    ///
    /// Example: msgbench compare results/x/20261122-010955 results/x/20261122-020955 --noise 3
    Compare(CompareArgs),
    /// Print the embedded default scenario (a starting point for your own file); --full prints
    /// an annotated template of every section and key, with defaults.
    ///
    /// Example: msgbench default-scenario --full > my.toml
    DefaultScenario(DefaultScenarioArgs),
    /// Run one of msgbench's built-in servers in the foreground until Ctrl-C (or --for), so
    /// other clients, or msgbench on another machine, can be measured against it.
    ///
    /// Example: msgbench serve rpc --listen 127.0.0.1:7000 --threads 2
    #[command(subcommand)]
    Serve(ServeCommand),
    /// Merge the result directories of the shards of one run (`run --shard I/N`) into one:
    /// histograms added exactly, counters summed (the accounting checked), per-second intervals
    /// aligned on the wall clock, CPU and faults summed, each shard's figures kept. `report`,
    /// `compare` and `search`'s reports read the merged directory like any other. Every shard
    /// must be there, of the same experiment: what is missing or foreign is refused.
    /// Walk-through: docs/distributed.md.
    ///
    /// Example: msgbench merge shards/0 shards/1 shards/2 shards/3 --out results/merged
    Merge(MergeArgs),
    /// Print a Kubernetes manifest that runs a scenario as N shards (a ConfigMap with the
    /// resolved scenario and an Indexed Job whose pod I runs `msgbench run --shard I/N` at an
    /// agreed start), or collect the shards' results from a finished Job's logs
    /// (`kube collect`). Walk-through: docs/distributed.md.
    ///
    /// Example: msgbench kube examples/sharded-rpc.toml --shards 4 --image registry.example/msgbench:0.1 --set 'rpc.address="rpc.bench.svc:7000"' > job.yaml
    ///
    /// Example: msgbench kube collect msgbench-sharded-rpc-261125210300 --out shards/
    Kube(KubeArgs),
    /// Print an sbatch script that runs a scenario as N shards on a Slurm cluster at one agreed
    /// start, each task's results in a folder of its own, and merges them when every task has
    /// ended. By default one job of N tasks: `srun` starts them (`--shard slurm`), the start is
    /// computed once when the job starts, and the merge is the job's last step. With --array, a
    /// job array of N one-task jobs, the start computed once here, and the merge a job that
    /// waits for every task (`--dependency=afterany`). Walk-through: docs/distributed.md.
    ///
    /// Example: msgbench slurm examples/sharded-rpc.toml --shards 4 --set 'rpc.address="bench1:7000"' | sbatch
    ///
    /// Example: msgbench slurm examples/sharded-rpc.toml --shards 8 --array --start-at +5m --partition bench > job.sh && sbatch job.sh
    Slurm(SlurmArgs),
    /// Write the msgbench scenario equivalent to another tool's workload file. `import omb`
    /// reads an OpenMessaging Benchmark workload (topics, partitionsPerTopic, messageSize,
    /// subscriptionsPerTopic, consumerPerSubscription, producersPerTopic, producerRate,
    /// testDurationMinutes) and writes a `pubsub` scenario, each setting without a counterpart
    /// named in its comments.
    ///
    /// Example: msgbench import omb workloads/1-topic-1-partition-1kb.yaml --broker nats --address 127.0.0.1:4222 > omb.toml
    #[command(subcommand)]
    Import(ImportCommand),
}

/// What every one-line run takes (`msgbench http|redis|grpc|ws`): the load, the run's length,
/// the checks and where results go.
#[derive(Debug, Args)]
pub struct LineArgs {
    /// Requests per second on an open-loop schedule (absent: closed loop).
    #[arg(long, short, value_name = "PER_SEC", allow_negative_numbers = true)]
    pub rate: Option<f64>,
    /// Connections.
    #[arg(long, short, value_name = "N", default_value_t = 10)]
    pub connections: u32,
    /// Requests in flight per connection (pipelined above 1).
    #[arg(long, short, value_name = "N", default_value_t = 1)]
    pub window: u32,
    /// Measured time.
    #[arg(long, value_name = "DURATION", default_value = "10s")]
    pub duration: String,
    /// Discarded warm-up before it.
    #[arg(long, value_name = "DURATION", default_value = "1s")]
    pub warmup: String,
    /// Latency objective for the reports' advice, e.g. "p99 < 10ms".
    #[arg(long, value_name = "SLO")]
    pub slo: Option<String>,
    /// A check the run must pass (repeatable), as `run --threshold`: exit 3 when one fails.
    #[arg(long = "threshold", value_name = "CHECK")]
    pub thresholds: Vec<String>,
    /// Root directory of results (DIR/<command>/<YYYYmmdd-HHMMSS>/).
    #[arg(long, short, value_name = "DIR", default_value = "results")]
    pub out: PathBuf,
    /// Print nothing but errors.
    #[arg(long, short)]
    pub quiet: bool,
    /// Print the results as JSON on stdout instead of the summary table.
    #[arg(long)]
    pub json: bool,
    /// Print the scenario file these flags stand for (and run nothing).
    #[arg(long)]
    pub print_scenario: bool,
    /// Exit 5 when the run is invalid (as `run --strict`): for CI.
    #[arg(long)]
    pub strict: bool,
}

/// `msgbench http`.
#[derive(Debug, Args)]
pub struct HttpArgs {
    /// The URL to request: `http://host[:port]/path?query` or `https://…`.
    #[arg(value_name = "URL")]
    pub url: String,
    /// The request's method.
    #[arg(long, short, value_name = "METHOD", default_value = "GET")]
    pub method: String,
    /// An extra header, `Name: value` (repeatable).
    #[arg(long = "header", short = 'H', value_name = "NAME: VALUE")]
    pub headers: Vec<String>,
    /// The request's body.
    #[arg(long, short = 'd', value_name = "TEXT")]
    pub body: Option<String>,
    /// Requests from a file instead (vegeta's targets or JSON lines; URL, method and body are
    /// each line's, -H headers are added to every one).
    #[arg(long, value_name = "FILE", conflicts_with_all = ["method", "body"])]
    pub requests_file: Option<String>,
    /// Connect to this Unix socket instead of the URL's host and port (as curl's and oha's
    /// --unix-socket); the URL still gives the Host header and the path. HTTP/1.1 only.
    #[arg(long, value_name = "PATH")]
    pub unix_socket: Option<String>,
    /// The order of --requests-file: cycle (first to last, again) or random.
    #[arg(long, value_name = "ORDER", default_value = "cycle", value_parser = ["cycle", "random"], requires = "requests_file")]
    pub order: String,
    /// Keys of `{key}` in the URL, a header or the body (0, 1, … N−1).
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub keys: u64,
    /// How `{key}` is drawn: uniform, sequential or zipf.
    #[arg(long, value_name = "PATTERN", default_value = "uniform", value_parser = ["uniform", "sequential", "zipf"])]
    pub key_pattern: String,
    /// The load and the run.
    #[command(flatten)]
    pub load: LineArgs,
}

/// `msgbench redis`.
#[derive(Debug, Args)]
pub struct RedisLineArgs {
    /// The server's `host:port`, or its Unix socket: unix:///run/redis/redis.sock.
    #[arg(value_name = "HOST:PORT|unix:///PATH")]
    pub address: String,
    /// The command, its words as memtier's --command: `{key}` a key drawn from --keys,
    /// `{data}` a value of --value-bytes; `ping`, `get` and `set` alone are redis-benchmark's.
    #[arg(long, value_name = "COMMAND", default_value = "ping")]
    pub command: String,
    /// Keys in the key space (`{key}` is key:000000000000 … key:N−1); 0 uses one key.
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub keys: u64,
    /// How keys are drawn: uniform, sequential or zipf.
    #[arg(long, value_name = "PATTERN", default_value = "uniform", value_parser = ["uniform", "sequential", "zipf"])]
    pub key_pattern: String,
    /// Bytes of `{data}` (and of `set`'s value).
    #[arg(long, value_name = "N", default_value_t = 3)]
    pub value_bytes: u32,
    /// The load and the run.
    #[command(flatten)]
    pub load: LineArgs,
}

/// `msgbench grpc`.
#[derive(Debug, Args)]
pub struct GrpcLineArgs {
    /// The server: `http://host:port` (cleartext HTTP/2) or `https://…`.
    #[arg(value_name = "URL")]
    pub url: String,
    /// The method, `package.Service/Method` (unary or server streaming).
    #[arg(long, value_name = "SERVICE/METHOD")]
    pub call: String,
    /// The .proto that describes it; without it, the server's reflection is asked.
    #[arg(long, value_name = "FILE")]
    pub proto: Option<PathBuf>,
    /// The request message as JSON (as ghz's -d).
    #[arg(long, short = 'd', value_name = "JSON", default_value = "{}")]
    pub data: String,
    /// Request metadata, `name: value` (repeatable).
    #[arg(long = "metadata", short = 'H', value_name = "NAME: VALUE")]
    pub metadata: Vec<String>,
    /// The load and the run.
    #[command(flatten)]
    pub load: LineArgs,
}

/// `msgbench ws`.
#[derive(Debug, Args)]
pub struct WsLineArgs {
    /// The JSON-RPC server's `ws://host:port[/path]`.
    #[arg(value_name = "URL")]
    pub url: String,
    /// The JSON-RPC method.
    #[arg(long, value_name = "NAME", default_value = "eth_chainId")]
    pub method: String,
    /// Its params as JSON (usually an array).
    #[arg(long, value_name = "JSON", default_value = "[]")]
    pub params: String,
    /// The load and the run.
    #[command(flatten)]
    pub load: LineArgs,
}

/// `msgbench import`.
#[derive(Debug, Subcommand)]
pub enum ImportCommand {
    /// An OpenMessaging Benchmark workload (YAML) as a `pubsub` scenario, printed (or written
    /// to --out).
    ///
    /// Example: msgbench import omb workloads/1-topic-1-partition-1kb.yaml --broker redis --address 127.0.0.1:6379 --out omb.toml
    Omb(ImportOmbArgs),
}

/// `msgbench import omb`.
#[derive(Debug, Args)]
pub struct ImportOmbArgs {
    /// The workload file (OMB's `workloads/*.yaml`).
    #[arg(value_name = "WORKLOAD")]
    pub workload: PathBuf,
    /// The broker to publish through: nats, redis, mqtt or mqtt5 (QoS 0), kafka (acks=1),
    /// redis-streams or jetstream.
    #[arg(long, default_value = "nats", value_parser = clap::builder::PossibleValuesParser::new(msgbench_model::pubsub::Broker::names()))]
    pub broker: String,
    /// Its host:port (default: the broker's usual port on 127.0.0.1).
    #[arg(long, value_name = "HOST:PORT")]
    pub address: Option<String>,
    /// Write the scenario to this file instead of printing it (refused if it exists).
    #[arg(long, short, value_name = "FILE")]
    pub out: Option<PathBuf>,
}

/// `msgbench merge`.
#[derive(Debug, Args)]
pub struct MergeArgs {
    /// The shards' result directories (each written by `run --shard I/N`, or its `latest`).
    #[arg(required = true, num_args = 1.., value_name = "DIR")]
    pub dirs: Vec<PathBuf>,
    /// Where the merged result directory goes (created; must not exist or be empty).
    #[arg(long, short, value_name = "DIR")]
    pub out: PathBuf,
    /// Print nothing but errors.
    #[arg(long, short)]
    pub quiet: bool,
}

/// `msgbench kube`.
#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub struct KubeArgs {
    /// Collect a finished Job's results instead of printing a manifest.
    #[command(subcommand)]
    pub collect: Option<KubeCommand>,
    /// The scenario and overrides (resolved here, shipped in the ConfigMap).
    #[command(flatten)]
    pub scenario: ScenarioArgs,
    /// How many shards (pods) run the scenario.
    #[arg(long, value_name = "N", required = true)]
    pub shards: Option<u32>,
    /// The container image with msgbench (built from the project's Containerfile).
    #[arg(long, value_name = "IMAGE", required = true)]
    pub image: Option<String>,
    /// When the shards start: RFC 3339 (2026-11-25T20:00:00Z), Unix ms, or +DURATION from now.
    /// Far enough ahead for every pod to be scheduled and its image pulled.
    #[arg(long, value_name = "TIME", default_value = "+3m")]
    pub start_at: String,
    /// CPUs of each pod, requested and limited alike (Guaranteed QoS: with the static CPU
    /// manager the pod gets whole CPUs, so pinning means something).
    #[arg(long, value_name = "N", default_value_t = 2)]
    pub cpus: u32,
    /// Memory of each pod, requested and limited alike.
    #[arg(long, value_name = "QUANTITY", default_value = "1Gi")]
    pub memory: String,
    /// Namespace of the ConfigMap and Job.
    #[arg(long, value_name = "NAME", default_value = "default")]
    pub namespace: String,
}

/// `msgbench slurm`.
#[derive(Debug, Args)]
pub struct SlurmArgs {
    /// The scenario and overrides (resolved here and written into the script).
    #[command(flatten)]
    pub scenario: ScenarioArgs,
    /// How many shards (Slurm tasks) run the scenario.
    #[arg(long, value_name = "N")]
    pub shards: u32,
    /// A job array of N one-task jobs (`sbatch --array`), merged by a dependent job, instead of
    /// one job of N tasks: for clusters that schedule small jobs sooner than a wide one.
    #[arg(long)]
    pub array: bool,
    /// When the shards start. Without --array: +DURATION after the job starts (default +10s,
    /// time for srun to start every task), or an absolute time. With --array: RFC 3339, Unix
    /// ms, or +DURATION from now (default +2m), computed once here; an array task that starts
    /// after it refuses to run and its shard is missing from the merge.
    #[arg(long, value_name = "TIME")]
    pub start_at: Option<String>,
    /// Where results go: DIR/JOBID/shard-I/ for each task, DIR/JOBID/merged for the merge. A
    /// relative DIR is taken from the folder sbatch runs in; every node must write to it (a
    /// shared file system).
    #[arg(long, value_name = "DIR", default_value = "msgbench-results")]
    pub results: String,
    /// The msgbench each task runs: by default this one's absolute path (the same path must
    /// hold it on every node); `msgbench` takes it from each node's PATH.
    #[arg(long, value_name = "PATH")]
    pub msgbench: Option<String>,
    /// Tasks per node (--ntasks-per-node, without --array): 1 gives each shard a node of its
    /// own, as one load generator per host should be.
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub tasks_per_node: u32,
    /// CPUs of each task (--cpus-per-task).
    #[arg(long, value_name = "N", default_value_t = 2)]
    pub cpus_per_task: u32,
    /// The partition (--partition); without it, the cluster's default.
    #[arg(long, value_name = "NAME")]
    pub partition: Option<String>,
    /// The job's time limit (--time, Slurm's form: MM, HH:MM:SS, D-HH); without it, the runs'
    /// planned length plus 10 minutes (none when a run is ended by operations alone).
    #[arg(long, value_name = "LIMIT")]
    pub time: Option<String>,
    /// Any other option for the job's `#SBATCH` lines, as sbatch reads it; repeatable. E.g.
    /// --sbatch-option=--exclusive (a node to each task of an array too),
    /// --sbatch-option=--account=lab, --sbatch-option=--mem=4G, --sbatch-option=--constraint=x86.
    #[arg(
        long = "sbatch-option",
        value_name = "OPTION",
        allow_hyphen_values = true
    )]
    pub sbatch_options: Vec<String>,
}

/// `msgbench kube collect`.
#[derive(Debug, Subcommand)]
pub enum KubeCommand {
    /// Read each pod's result archive from a finished Job's logs (`kubectl logs`) and unpack
    /// the shards' result directories under --out, ready for `msgbench merge`.
    ///
    /// Example: msgbench kube collect msgbench-sharded-rpc-261125210300 --out shards/ && msgbench merge shards/shard-* --out results/merged
    Collect(KubeCollectArgs),
}

/// `msgbench kube collect`.
#[derive(Debug, Args)]
pub struct KubeCollectArgs {
    /// The Job's name (the manifest's first line and metadata.name; it ends with the start).
    pub job: String,
    /// Where the shards' directories go (shard-0, shard-1, …).
    #[arg(long, short, value_name = "DIR")]
    pub out: PathBuf,
    /// Namespace of the Job.
    #[arg(long, value_name = "NAME", default_value = "default")]
    pub namespace: String,
    /// The kubectl to run.
    #[arg(long, value_name = "PATH", default_value = "kubectl")]
    pub kubectl: String,
}

/// Built-in servers.
#[derive(Debug, Subcommand)]
pub enum ServeCommand {
    /// The RPC server: msgbench's framed request/response protocol over TCP or a Unix socket
    /// (docs/protocol.md).
    /// Each request carries the service time to simulate; `busy` requests occupy a server
    /// thread for it, `sleep` requests are answered by a timer.
    ///
    /// Example: msgbench serve rpc --listen 127.0.0.1:7000 --threads 2 --for 60s
    ///
    /// Example: msgbench serve rpc --listen unix:///tmp/rpc.sock --for 60s
    Rpc(ServeRpcArgs),
    /// The tick server: broadcasts market ticks over WebSocket (ws://HOST:PORT/ticks) on a
    /// schedule to every client that connects, each tick with its own sequence number and
    /// intended send time (docs/protocol.md, "The tick stream"). Clients pick the format with
    /// `?format=json|binary` and name themselves with `?client=NAME`; they acknowledge what they
    /// processed. `GET /` serves the browser client page. Prints what it counted per client
    /// (generated, queued, dropped, written, acknowledged) when it stops.
    ///
    /// Example: msgbench serve ticks --listen 127.0.0.1:9000 --rate 500000 --policy drop-oldest --for 60s
    Ticks(ServeTicksArgs),
    /// A JSON-RPC 2.0 server over WebSocket (ws://HOST:PORT/, any path): answers one method
    /// (default `eth_chainId` with "0x1") after a simulated service time; other methods get
    /// JSON-RPC's "Method not found". With --stream N each call is answered by N results
    /// carrying its id, then one whose result is --done (a streamed answer). Prints how many
    /// calls it answered when it stops.
    ///
    /// Example: msgbench serve ws-rpc --listen 127.0.0.1:8546 --method eth_chainId --result '"0x1"'
    ///
    /// Example: msgbench serve ws-rpc --method generate --result '"tok"' --stream 20 --every 10ms --service 50ms
    WsRpc(ServeWsRpcArgs),
    /// Server-Sent Events with known timing (HTTP/1.1): `GET /events` is a feed (event n due at
    /// the start + n/--rate, `id:` its number, its data's `ts` its due time on CLOCK_MONOTONIC,
    /// `Last-Event-ID` replayed); any other request gets a stream of --messages, the first
    /// --first after it, then one every --every, then `data: [DONE]` — an LLM completion's
    /// shape, for truth runs of `stream = "sse"`. --stall-every/--stall-for (or --stall-at)
    /// hold every message due in a stall until it ends.
    ///
    /// Example: msgbench serve sse --listen 127.0.0.1:8090 --first 50ms --every 10ms --messages 20
    ///
    /// Example: msgbench serve sse --listen 127.0.0.1:8090 --rate 5000 --stall-every 2s --stall-for 500ms --for 60s
    Sse(ServeSseArgs),
    /// An HTTP/1.1 server whose latency is known: every request (keep-alive, pipelined in
    /// order) gets `200 OK` and --body-bytes after --service, computed (--work busy: a thread
    /// then serves 1/service requests a second) or waited (--work sleep), fixed or exponential.
    /// A request's query may ask for its own: `/?service_us=250&bytes=4096&status=503`. Same
    /// limits and stall injection as `serve rpc`. Prints what it served when it stops.
    ///
    /// Example: msgbench serve http --listen 127.0.0.1:8080 --service 200us --work sleep --stall-every 2s --stall-for 500ms --for 60s
    Http(ServeHttpArgs),
    /// A gRPC server over cleartext HTTP/2 whose latency is known: every unary call, on any
    /// path, is answered by echoing its request message back after --service (computed with
    /// --work busy: one call at a time; waited with --work sleep: any number at once), fixed
    /// or exponential; `protos/msgbench.proto` describes its `msgbench.Echo/Call` (and
    /// `msgbench.Echo/Chat`, bidirectional: each message echoed in its own service time;
    /// `msgbench.Echo/Upload`, client-streaming: answers how many messages came). Its
    /// server-streaming `msgbench.Feed/Ticks` streams ticks at the rate the request asks (each
    /// stamped with when it was due; `gap_every` leaves some out): measure it with
    /// `system = "ticks"` and `[ticks.grpc]` (examples/grpc-stream.toml). Stalls hold answers
    /// and streams alike. Bounded: --max-streams per connection, --max-message (larger:
    /// RESOURCE_EXHAUSTED), --max-connections; a stream sends no faster than its client's
    /// flow-control window. Prints what it answered and streamed when it stops.
    ///
    /// Example: msgbench serve grpc --listen 127.0.0.1:50051 --service 200us --stall-every 2s --stall-for 500ms --for 60s
    Grpc(ServeGrpcArgs),
}

/// The service-time model of `serve http` and `serve grpc`.
#[derive(Debug, Args)]
pub struct ServiceTimeArgs {
    /// Service time of a request (the mean when --distribution exponential), e.g. 200us.
    #[arg(long, value_name = "DURATION", default_value = "0")]
    pub service: String,
    /// fixed or exponential service times.
    #[arg(long, value_name = "KIND", default_value = "fixed")]
    pub distribution: String,
    /// busy (a server thread computes for the service time: it serves one request at a time)
    /// or sleep (a timer holds the response: a thread serves any number at once).
    #[arg(long, value_name = "KIND", default_value = "busy")]
    pub work: String,
}

/// `msgbench serve grpc`.
#[derive(Debug, Args)]
pub struct ServeGrpcArgs {
    /// Address to listen on (port 0: any free port; the chosen one is printed).
    #[arg(long, value_name = "HOST:PORT", default_value = "127.0.0.1:50051")]
    pub listen: String,
    #[command(flatten)]
    pub time: ServiceTimeArgs,
    /// Longest service time; longer draws are served this long and counted as clamped.
    #[arg(long, value_name = "DURATION", default_value = "10s")]
    pub max_service: String,
    /// Fault injection: hold every answer due in a stall this often (e.g. 2s) ...
    #[arg(long, value_name = "DURATION")]
    pub stall_every: Option<String>,
    /// ... until the stall, this long (e.g. 500ms), is over.
    #[arg(long, value_name = "DURATION", default_value = "100ms")]
    pub stall_for: String,
    /// Largest request message, bytes; a larger one is answered RESOURCE_EXHAUSTED.
    #[arg(long, value_name = "BYTES", default_value_t = 4 << 20)]
    pub max_message: u32,
    /// Concurrent streams per connection (SETTINGS_MAX_CONCURRENT_STREAMS).
    #[arg(long, value_name = "N", default_value_t = 256)]
    pub max_streams: u32,
    /// Answer server reflection with UNIMPLEMENTED, as a server without it does (by default
    /// it describes its services, so scenarios and tools may use `reflection` instead of the
    /// .proto).
    #[arg(long)]
    pub no_reflection: bool,
    /// Answer every call (reflection included) that lacks this metadata UNAUTHENTICATED, as a
    /// server behind a token does: NAME=VALUE, e.g. authorization="Bearer t0ken".
    #[arg(long, value_name = "NAME=VALUE")]
    pub require_metadata: Option<String>,
    /// Most connections open at once; more are closed on accept.
    #[arg(long, value_name = "N", default_value_t = 4096)]
    pub max_connections: u32,
    /// Stop by itself after this long (e.g. 30s); without it, serve until Ctrl-C.
    #[arg(long = "for", value_name = "DURATION")]
    pub run_for: Option<String>,
}

/// `msgbench serve http`.
#[derive(Debug, Args)]
pub struct ServeHttpArgs {
    /// Address to listen on (port 0: any free port; the chosen one is printed), or a Unix
    /// socket: unix:///tmp/http.sock (a stale socket there is replaced; removed on exit).
    #[arg(
        long,
        value_name = "HOST:PORT|unix:///PATH",
        default_value = "127.0.0.1:8080"
    )]
    pub listen: String,
    #[command(flatten)]
    pub time: ServiceTimeArgs,
    /// Response body size, bytes.
    #[arg(long, value_name = "BYTES", default_value_t = 13)]
    pub body_bytes: u32,
    /// A fixed body for every response instead of --body-bytes of filler, e.g.
    /// '{"jsonrpc":"2.0","id":1,"result":"0x1"}' to stand in for a JSON-RPC node.
    #[arg(long, value_name = "TEXT")]
    pub body: Option<String>,
    #[command(flatten)]
    pub server: RequestServerArgs,
}

/// `msgbench serve ws-rpc`.
#[derive(Debug, Args)]
pub struct ServeWsRpcArgs {
    /// Address to listen on (port 0: any free port; the chosen one is printed).
    #[arg(long, value_name = "HOST:PORT", default_value = "127.0.0.1:8546")]
    pub listen: String,
    /// The JSON-RPC method it answers.
    #[arg(long, value_name = "NAME", default_value = "eth_chainId")]
    pub method: String,
    /// Its result, as JSON (a string needs its quotes: '"0x1"').
    #[arg(long, value_name = "JSON", default_value = "\"0x1\"")]
    pub result: String,
    /// Time each call takes (e.g. 50us).
    #[arg(long, value_name = "DURATION", default_value = "0")]
    pub service: String,
    /// How the time is spent: busy (the server thread spins; answers in order) or sleep (a
    /// timer answers; a slow call is overtaken).
    #[arg(long, value_name = "WORK", default_value = "busy")]
    pub work: String,
    /// Answer each call with a stream: this many responses carrying its id (the first after
    /// --service, then one every --every), then one whose result is --done. 0: one response.
    /// A stream's messages go out on a timer: --work does not apply to them.
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub stream: u32,
    /// Time between a stream's messages (with --stream).
    #[arg(
        long,
        value_name = "DURATION",
        default_value = "10ms",
        requires = "stream"
    )]
    pub every: String,
    /// The result that ends a stream, as JSON (with --stream).
    #[arg(
        long,
        value_name = "JSON",
        default_value = "\"[DONE]\"",
        requires = "stream"
    )]
    pub done: String,
    /// Close a connection that sends nothing (and waits for no answer), or reads none of its
    /// answers, for this long ("0": never).
    #[arg(long, value_name = "DURATION", default_value = "60s")]
    pub idle_timeout: String,
    #[command(flatten)]
    pub server: ServerLimits,
}

/// Threads, limits and lifetime every built-in server with worker threads takes (`serve rpc`,
/// `http`, `ws-rpc`, `ticks`), written once.
#[derive(Debug, Args)]
pub struct ServerLimits {
    /// Server threads; connections are dealt to them round-robin.
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub threads: u32,
    /// CPUs of the server threads, comma-separated, one per thread.
    #[arg(long, value_name = "CPUS", value_delimiter = ',')]
    pub pin: Vec<usize>,
    /// Largest request or message a client may send, bytes; a client sending a larger one is
    /// disconnected.
    #[arg(long, value_name = "BYTES", default_value_t = 1 << 20)]
    pub max_frame: u32,
    /// Most connections open at once; more are refused on accept [default: 4096 for `rpc` and
    /// `http`, 1024 for the WebSocket servers].
    #[arg(long, value_name = "N")]
    pub max_connections: Option<u32>,
    /// Stop by itself after this long (e.g. 30s); without it, serve until Ctrl-C.
    #[arg(long = "for", value_name = "DURATION")]
    pub run_for: Option<String>,
    /// Serve the server's counters (responses, connections, faults) as OpenMetrics series
    /// `msgbench_server_*_total` at http://ADDR/metrics, for Prometheus (docs/live-metrics.md).
    #[arg(long, value_name = "ADDR")]
    pub metrics_listen: Option<String>,
}

/// `--max-connections` of the request servers (`serve rpc`, `serve http`) when not given.
pub const REQUEST_SERVER_CONNECTIONS: u32 = 4096;
/// `--max-connections` of the WebSocket servers (`serve ws-rpc`, `serve ticks`) when not given.
pub const WS_SERVER_CONNECTIONS: u32 = 1024;

/// `msgbench serve ticks`.
#[derive(Debug, Args)]
pub struct ServeTicksArgs {
    /// Address to listen on (port 0: any free port; the chosen one is printed).
    #[arg(long, value_name = "HOST:PORT", default_value = "127.0.0.1:9000")]
    pub listen: String,
    /// Ticks per second, on an absolute schedule (per client: each gets every tick).
    #[arg(long, value_name = "PER_SEC", default_value_t = 100_000.0, conflicts_with_all = ["every", "immediate"])]
    pub rate: f64,
    /// Arrival process of --rate: uniform or poisson.
    #[arg(long, value_name = "KIND", default_value = "uniform")]
    pub arrivals: String,
    /// Instead of --rate: a batch of --batch ticks every DURATION (e.g. 1ms).
    #[arg(long, value_name = "DURATION", conflicts_with = "immediate")]
    pub every: Option<String>,
    /// Ticks per --every.
    #[arg(long, value_name = "N", default_value_t = 1, requires = "every")]
    pub batch: u32,
    /// Instead of --rate: as fast as the slowest client takes them.
    #[arg(long)]
    pub immediate: bool,
    /// Format of clients that do not ask for one: binary (36 bytes) or json.
    #[arg(long, value_name = "FORMAT", default_value = "binary")]
    pub format: String,
    /// Distinct symbols the stream cycles through.
    #[arg(long, value_name = "N", default_value_t = 100)]
    pub symbols: u32,
    /// Ticks each client's send queue holds before --policy applies.
    #[arg(long, value_name = "TICKS", default_value_t = 65_536)]
    pub queue: u64,
    /// What happens to a client whose queue is full: drop-oldest, drop-newest, disconnect, or
    /// unbounded (let it grow, up to 64 Mi ticks).
    #[arg(long, value_name = "POLICY", default_value = "drop-oldest")]
    pub policy: String,
    /// Ticks written to a socket per flush (one write of many frames).
    #[arg(long, value_name = "N", default_value_t = 256)]
    pub write_batch: u32,
    /// SO_SNDBUF of client sockets, bytes (0: the OS default). The kernel's buffer is a queue
    /// too: a small one keeps drop-oldest latency low.
    #[arg(long, value_name = "BYTES", default_value_t = 0)]
    pub send_buffer: u32,
    /// Close a connection that has not subscribed (`?wait=1`) and sends nothing for this long
    /// ("0": never).
    #[arg(long, value_name = "DURATION", default_value = "60s")]
    pub idle_timeout: String,
    /// Send the ticks over UDP instead, one 36-byte binary tick per datagram, to each of these
    /// addresses (comma-separated: a unicast feed's clients, `ticks.address = "udp://HOST:PORT"`
    /// receiving on PORT, PORT+1, …) or to one multicast group; nothing is listened on.
    #[arg(long, value_name = "HOST:PORT,…", value_delimiter = ',')]
    pub udp_to: Vec<String>,
    /// UDP: never send a tick whose number is a multiple of N (a lossy feed, on known numbers).
    #[arg(long, value_name = "N", default_value_t = 0, requires = "udp_to")]
    pub skip_every: u64,
    /// UDP: send one tick of every N twice.
    #[arg(long, value_name = "N", default_value_t = 0, requires = "udp_to")]
    pub duplicate_every: u64,
    /// UDP: send one tick of every N after the next one.
    #[arg(long, value_name = "N", default_value_t = 0, requires = "udp_to")]
    pub reorder_every: u64,
    /// UDP multicast: the address of the interface to send the group's datagrams out of.
    #[arg(
        long,
        value_name = "IPV4",
        default_value = "0.0.0.0",
        requires = "udp_to"
    )]
    pub multicast_interface: String,
    #[command(flatten)]
    pub server: ServerLimits,
}

/// `msgbench serve sse`.
#[derive(Debug, Args)]
pub struct ServeSseArgs {
    /// Address to listen on (port 0: any free port; the chosen one is printed).
    #[arg(long, value_name = "HOST:PORT", default_value = "127.0.0.1:8090")]
    pub listen: String,
    /// Feed events per second (`GET /events`; `?rate=N` per client).
    #[arg(long, value_name = "PER_SEC", default_value_t = 1000.0)]
    pub rate: f64,
    /// Messages of a streamed response (`?messages=N`).
    #[arg(long, value_name = "N", default_value_t = 20)]
    pub messages: u32,
    /// A streamed response's first message, after the request (`?first_us=U`).
    #[arg(long, value_name = "DURATION", default_value = "50ms")]
    pub first: String,
    /// Between a streamed response's messages (`?every_us=U`).
    #[arg(long, value_name = "DURATION", default_value = "10ms")]
    pub every: String,
    /// A stall every this long from the start ("0": none).
    #[arg(long, value_name = "DURATION", default_value = "0")]
    pub stall_every: String,
    /// How long each stall lasts.
    #[arg(long, value_name = "DURATION", default_value = "500ms")]
    pub stall_for: String,
    /// Instead of --stall-every: one stall this long after the first request.
    #[arg(long, value_name = "DURATION", conflicts_with = "stall_every")]
    pub stall_at: Option<String>,
    /// Stop by itself after this long (e.g. 30s); without it, serve until Ctrl-C.
    #[arg(long = "for", value_name = "DURATION")]
    pub run_for: Option<String>,
}

/// `msgbench serve rpc`.
#[derive(Debug, Args)]
pub struct ServeRpcArgs {
    /// Address to listen on (port 0: any free port; the chosen one is printed), or a Unix
    /// socket: unix:///tmp/rpc.sock (a stale socket there is replaced; removed on exit).
    #[arg(
        long,
        value_name = "HOST:PORT|unix:///PATH",
        default_value = "127.0.0.1:7000"
    )]
    pub listen: String,
    #[command(flatten)]
    pub server: RequestServerArgs,
}

/// Limits and fault injection of the request servers (`serve rpc`, `serve http`).
#[derive(Debug, Args)]
pub struct RequestServerArgs {
    #[command(flatten)]
    pub limits: ServerLimits,
    /// Fault injection: stall every server thread this often (e.g. 1s) ...
    #[arg(long, value_name = "DURATION")]
    pub stall_every: Option<String>,
    /// ... for this long each time (e.g. 100ms).
    #[arg(long, value_name = "DURATION", default_value = "100ms")]
    pub stall_for: String,
    /// Longest service time a request may ask for; longer ones are served this long and
    /// counted as clamped.
    #[arg(long, value_name = "DURATION", default_value = "10s")]
    pub max_service: String,
    /// Close a connection that sends and reads nothing for this long ("0": never).
    #[arg(long, value_name = "DURATION", default_value = "60s")]
    pub idle_timeout: String,
}

/// Where the scenario comes from and what to change in it.
#[derive(Debug, Clone, Args)]
pub struct ScenarioArgs {
    /// Scenario file (TOML). Without it, the embedded default experiment is used.
    pub scenario: Option<PathBuf>,
    /// Set any scenario field: PATH=VALUE in TOML syntax, repeatable. Setting a field the file
    /// sweeps replaces that sweep axis; nothing after '=' removes the field, so its default
    /// applies. The shortcut flags below are applied after --set.
    /// Examples: --set queue.capacity=8  --set pacing.mode=rate --set pacing.per_sec=1e5
    /// --set 'sweep."queue.capacity"=[64,8]'  --set 'sweep={}' (no sweep at all)
    /// --set queue.capacity= (back to the default)
    #[arg(long = "set", value_name = "PATH=VALUE")]
    pub set: Vec<String>,
    /// Measured time per run, overriding run.duration (e.g. 500ms, 5s, 1m).
    #[arg(long, value_name = "DURATION")]
    pub duration: Option<String>,
    /// Discarded warm-up per run, overriding run.warmup (e.g. 0, 500ms).
    #[arg(long, value_name = "DURATION")]
    pub warmup: Option<String>,
    /// Stop each run after this many measured operations (run.operations).
    #[arg(long, value_name = "COUNT")]
    pub operations: Option<u64>,
    /// Runs per sweep point, overriding run.replicates.
    #[arg(long, value_name = "N")]
    pub replicates: Option<u32>,
    /// Keep up to N raw per-message latencies per run in runs/<id>.latencies.csv.
    #[arg(long, value_name = "N")]
    pub emit_latencies: Option<u64>,
    /// Latency objective for the advice in the reports (and the target of `search`), e.g.
    /// "p99 < 10ms"; sets report.slo.
    #[arg(long, value_name = "SLO")]
    pub slo: Option<String>,
    /// A check every run must pass, added to report.thresholds (repeatable); a run that fails
    /// one makes `run` exit 3 once everything is written. Latency percentiles with a
    /// duration, delivered/failed/dropped/skipped with a count or a percentage, rate in
    /// messages/s or % of the target, scoped to a class or stream client (a pubsub
    /// subscription or its group), or a pubsub run's publish latency (`publish.`).
    /// Examples: --threshold "p99 < 10ms" --threshold "delivered >= 99.9%"
    /// --threshold "failed == 0" --threshold "rate >= 95%" --threshold "class.get.p99 < 5ms"
    /// --threshold "client.slow-subscriber.dropped == 0" --threshold "publish.p99 < 5ms"
    #[arg(long = "threshold", value_name = "CHECK")]
    pub thresholds: Vec<String>,
}

/// `msgbench default-scenario`.
#[derive(Debug, Args)]
pub struct DefaultScenarioArgs {
    /// Every section and key, annotated, instead of the short default.
    #[arg(long)]
    pub full: bool,
}

/// `msgbench compare`.
#[derive(Debug, Args)]
pub struct CompareArgs {
    /// The baseline result directory.
    #[arg(value_name = "A")]
    pub a: PathBuf,
    /// The result directory compared with it.
    #[arg(value_name = "B")]
    pub b: PathBuf,
    /// Smallest change, in percent, reported as significant.
    #[arg(long, value_name = "PERCENT", default_value_t = 5.0)]
    pub noise: f64,
    /// Exit 4 when any metric of any point has this verdict (a CI regression gate; the same
    /// statistics as the table: Welch's t on the logs, Bonferroni over the metrics, 3
    /// replicates a side at least for a verdict).
    /// Example: msgbench compare base/ head/ --fail-on regressed
    #[arg(long, value_name = "VERDICT")]
    pub fail_on: Option<FailOn>,
    /// Exit 4 when METRIC regressed (a significant change) by more than PERCENT: a gate on
    /// named metrics with their own allowance (repeatable). Metrics: delivered/s, p50, p99,
    /// p99.9, p99.99, max, CPU/msg.
    /// Example: --max-regression p99=10% --max-regression delivered/s=5%
    #[arg(long = "max-regression", value_name = "METRIC=PERCENT")]
    pub max_regression: Vec<String>,
    /// Output: `markdown` (the table, for a terminal or a CI job summary) or `json` (for tools).
    #[arg(long, value_name = "FORMAT", default_value = "markdown")]
    pub format: CompareFormat,
}

/// Verdicts `compare --fail-on` can fail a build on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum FailOn {
    /// Any metric significantly worse.
    Regressed,
}

/// Output formats of `compare`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum CompareFormat {
    /// Markdown tables.
    Markdown,
    /// One JSON document.
    Json,
}

/// `msgbench report`.
#[derive(Debug, Args)]
pub struct ReportArgs {
    /// A result directory written by `msgbench run` (it holds runs/*.json).
    #[arg(value_name = "DIR")]
    pub dir: PathBuf,
    /// Latency objective for the advice, e.g. "p99 < 10ms" (default: report.slo saved in
    /// DIR/experiment.toml, if any).
    #[arg(long, value_name = "SLO")]
    pub slo: Option<String>,
}

/// `msgbench run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// The scenario and overrides.
    #[command(flatten)]
    pub scenario: ScenarioArgs,
    /// Root directory of results; each invocation writes DIR/<experiment>/<YYYYmmdd-HHMMSS>/.
    #[arg(long, short, value_name = "DIR", default_value = "results")]
    pub out: PathBuf,
    /// Print nothing but errors: no progress, no summary table, no warnings (they are in the
    /// result files).
    #[arg(long, short)]
    pub quiet: bool,
    /// Print the results as JSON on stdout instead of the summary table.
    #[arg(long)]
    pub json: bool,
    /// Resume the interrupted experiment in this result directory: its saved experiment.toml
    /// is run, and runs already written there are kept, not run again.
    #[arg(long, value_name = "DIR", conflicts_with_all = ["scenario", "set", "duration", "warmup", "operations", "replicates", "emit_latencies", "thresholds"])]
    pub resume: Option<PathBuf>,
    /// Serve live OpenMetrics (Prometheus) series at http://ADDR/metrics while the experiment
    /// runs: counters, in flight, target and delivered rate, interval latency quantiles, with
    /// labels experiment, run_id, point and shard (MSGBENCH_SHARD). A port in use is refused
    /// before anything runs. Series and a dashboard: docs/live-metrics.md.
    /// Example: msgbench run examples/pacing.toml --metrics-listen 127.0.0.1:9464
    #[arg(long, value_name = "ADDR")]
    pub metrics_listen: Option<String>,
    /// With --metrics-listen: keep serving the final figures this long after the last run, so a
    /// scraper sees them (default 5s; 0 exits at once).
    #[arg(
        long,
        value_name = "DURATION",
        default_value = "5s",
        requires = "metrics_listen"
    )]
    pub metrics_hold: String,
    /// Progress on stderr. `live`: a panel redrawn every second (achieved vs target rate and
    /// its last minute, p50/p99/max, send lag, backlog, failures, classes), the default when
    /// stdout and stderr are terminals. `line`: one progress line, the default otherwise.
    /// `json`, for wrappers and CI logs: one JSON line per second (and one per finished run):
    /// run_id, elapsed_s, eta_s, delivered_per_sec, p99_ns, counters.
    #[arg(long, value_name = "FORMAT")]
    pub progress: Option<ProgressFormat>,
    /// Run as shard I of N of a run spread over N load generators: this process opens the
    /// connections g with g mod N = I and keeps their schedules and budgets, so the N shards
    /// together offer exactly the unsharded run. `k8s/N` takes I from JOB_COMPLETION_INDEX
    /// (a Kubernetes Indexed Job), `slurm` takes I/N from the Slurm task (SLURM_PROCID of
    /// the srun step's tasks, or a job array's index; docs/distributed.md). Merge
    /// the shards' directories with `msgbench merge`. docs/distributed.md.
    /// Example: msgbench run rpc.toml --shard 1/4 --start-at +30s
    #[arg(long, value_name = "I/N")]
    pub shard: Option<String>,
    /// Start the first run at this wall-clock time, every later run at its planned slot, so
    /// that shards on several hosts keep one timeline: RFC 3339 (2026-11-25T20:00:00Z), Unix
    /// ms, or +DURATION from now (not for a publish/subscribe run's shards, which need one
    /// instant: RFC 3339 or Unix ms). A time in the past is refused; a run that starts late
    /// says by how much.
    #[arg(long, value_name = "TIME")]
    pub start_at: Option<String>,
    /// When done, print the result directory to stdout as one base64 tar.gz between marker
    /// lines (what `msgbench kube collect` reads from a pod's log).
    #[arg(long)]
    pub archive_to_stdout: bool,
    /// Exit 5 when every run of the experiment is invalid (not only when a run delivered
    /// nothing, which always exits 5): for a CI job that must not publish a measurement its
    /// own verdict rejects. A run is invalid for any failed request or a send lag over
    /// run.send_lag_limit, which a shared runner meets by chance: hence not the default.
    /// Example: msgbench run rpc.toml --strict --threshold "p99 < 2ms"
    #[arg(long)]
    pub strict: bool,
}

/// Formats of `run --progress`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ProgressFormat {
    /// One JSON object per line.
    Json,
    /// The live view: a panel redrawn every second (the default when stdout and stderr are
    /// terminals).
    Live,
    /// One progress line, rewritten every second (the default when stdout is not a terminal).
    Line,
}

/// `msgbench search`.
#[derive(Debug, Args)]
pub struct SearchArgs {
    /// The scenario (one configuration: no sweep, with an SLO from --slo or report.slo) and
    /// overrides; its pacing becomes `rate`. The embedded default sweeps, so give a file or
    /// --set 'sweep={}'.
    #[command(flatten)]
    pub scenario: ScenarioArgs,
    /// First rate tried, messages per second.
    #[arg(long, value_name = "PER_SEC", default_value_t = 1000.0)]
    pub start: f64,
    /// Highest rate tried, messages per second.
    #[arg(long, value_name = "PER_SEC", default_value_t = 1e8)]
    pub max: f64,
    /// Stop when the highest passing and lowest failing rates are this close, percent.
    #[arg(long, value_name = "PERCENT", default_value_t = 5.0)]
    pub precision: f64,
    /// Smallest share of attempted messages that must be delivered, percent.
    #[arg(long, value_name = "PERCENT", default_value_t = 99.9)]
    pub min_success: f64,
    /// Most steps (each is a full warm-up + measured run per replicate).
    #[arg(long, value_name = "N", default_value_t = 25)]
    pub max_steps: usize,
    /// Root directory of results; writes DIR/<experiment>/<stamp>/.
    #[arg(long, short, value_name = "DIR", default_value = "results")]
    pub out: PathBuf,
    /// Print nothing but errors and the answer.
    #[arg(long, short)]
    pub quiet: bool,
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_definition_is_consistent() {
        Cli::command().debug_assert();
    }
}
