//! The validation vocabulary every section of a scenario shares: the error that names the
//! field and the fix ([`ScenarioError`]), the machine's limits, the caps every duration and
//! count obeys, and checks more than one section makes (CPU pins, addresses, shares of a mix,
//! WebSocket addresses, built-in server limits). Imported by every section, importing none.
use std::collections::BTreeMap;
use std::time::Duration;

/// Longest duration any field accepts (one year): keeps every timestamp sum far from overflow.
pub const MAX_DURATION: Duration = Duration::from_secs(365 * 24 * 3600);

/// Most raw latencies a run keeps (`run.emit_latencies`): 800 MB of memory.
pub const MAX_RAW_LATENCIES: u64 = 100_000_000;

/// Why a scenario is not valid. Every message names the field and how to fix it.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum ScenarioError {
    /// The file is not valid TOML or has wrong keys/types (message carries line and column).
    #[error("{source_name}: {message}")]
    Syntax {
        /// File name or `--set`.
        source_name: String,
        /// toml's message (line, column, snippet, expected keys).
        message: String,
    },
    /// A field has a value the engine cannot run.
    #[error("{source_name}: `{field}` {problem}; {fix}")]
    Invalid {
        /// File name.
        source_name: String,
        /// Dotted field path.
        field: String,
        /// What is wrong.
        problem: String,
        /// How to fix it.
        fix: String,
    },
}

/// What the machine that checks a scenario offers, passed in by the caller so validation stays
/// pure: the CPUs this process may run on, and a way to ask a gRPC server for its descriptors
/// (server reflection), which needs the network.
#[derive(Debug, Clone, Default)]
pub struct MachineLimits {
    /// Allowed CPU ids.
    pub cpus: Vec<usize>,
    /// Asks a gRPC server for its descriptors; `None` where no network may be used.
    pub reflection: Option<Reflector>,
}

impl MachineLimits {
    /// These CPUs, and no server reflection.
    pub fn cpus(cpus: Vec<usize>) -> MachineLimits {
        MachineLimits {
            cpus,
            reflection: None,
        }
    }
}

/// A gRPC server to ask for its descriptors (server reflection), from the scenario's address
/// and TLS settings.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ReflectionTarget {
    /// The address as the scenario gives it (`http://…` or `https://…`).
    pub url: String,
    /// `host:port` to connect to.
    pub address: String,
    /// `:authority`.
    pub authority: String,
    /// TLS (`https://`): the name the certificate must carry.
    pub server_name: Option<String>,
    /// A private CA's certificates.
    pub ca_file: Option<String>,
    /// No certificate check.
    pub insecure: bool,
    /// Metadata the calls carry (lower-case names: `authorization`, …): a server that wants
    /// them for its calls may want them for reflection too.
    pub metadata: Vec<(String, String)>,
}

/// How descriptors are asked of a server: its target → `FileDescriptorSet` bytes, or why not.
pub type ReflectFn = dyn Fn(&ReflectionTarget) -> Result<Vec<u8>, String> + Send + Sync;

/// Fetches the descriptors a gRPC server offers through server reflection, as the bytes of a
/// `FileDescriptorSet`, or says why it could not. Called when a scenario is checked, once per
/// distinct server (the caller caches).
#[derive(Clone)]
pub struct Reflector(pub std::sync::Arc<ReflectFn>);

impl std::fmt::Debug for Reflector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Reflector")
    }
}

/// Builds the error for an invalid field: `(field, problem, fix)`.
pub type Invalid<'a> = dyn Fn(&str, String, &str) -> ScenarioError + 'a;

/// Checks a per-thread CPU list: empty, or one CPU this process may use per thread.
pub(crate) fn check_pins(
    field: &str,
    role: &str,
    pin: &[usize],
    threads: u32,
    limits: &MachineLimits,
    invalid: &Invalid,
) -> Result<(), ScenarioError> {
    if !pin.is_empty() && pin.len() != threads as usize {
        return Err(invalid(
            field,
            format!("names {} CPUs for {threads} threads", pin.len()),
            &format!("give one CPU per {role} thread, or none"),
        ));
    }
    if let Some(cpu) = pin.iter().find(|c| !limits.cpus.contains(c)) {
        return Err(invalid(
            field,
            format!("contains CPU {cpu}, which this process cannot run on"),
            &format!("pick from the CPUs {:?}", limits.cpus),
        ));
    }
    Ok(())
}

/// Checks `host:port` without resolving it (resolution happens when connecting).
pub(crate) fn check_address(
    field: &str,
    address: &str,
    invalid: &Invalid,
) -> Result<(), ScenarioError> {
    let ok = address
        .rsplit_once(':')
        .is_some_and(|(host, port)| !host.is_empty() && port.parse::<u16>().is_ok_and(|p| p > 0));
    if ok {
        Ok(())
    } else {
        Err(invalid(
            field,
            format!("is \"{address}\", not host:port"),
            "write it like \"127.0.0.1:6379\" or \"[::1]:7000\"",
        ))
    }
}

/// The scheme of a Unix domain socket's address (`unix:///run/app.sock`).
pub const UNIX_SCHEME: &str = "unix://";

/// Longest path a Unix socket's address holds (`sun_path` is 108 bytes with its NUL).
const MAX_UNIX_PATH: usize = 107;

/// Checks `host:port` or `unix:///absolute/path` (a Unix domain socket).
pub(crate) fn check_endpoint(
    field: &str,
    address: &str,
    invalid: &Invalid,
) -> Result<(), ScenarioError> {
    match address.strip_prefix(UNIX_SCHEME) {
        Some(path) => check_unix_path(field, path, invalid),
        None => check_address(field, address, invalid).map_err(|_| {
            invalid(
                field,
                format!("is \"{address}\", not host:port or unix:///path"),
                "write it like \"127.0.0.1:6379\", \"[::1]:7000\" or \"unix:///run/redis.sock\"",
            )
        }),
    }
}

/// Checks a Unix socket's path: absolute, and short enough for the kernel.
pub(crate) fn check_unix_path(
    field: &str,
    path: &str,
    invalid: &Invalid,
) -> Result<(), ScenarioError> {
    if !path.starts_with('/') {
        return Err(invalid(
            field,
            format!("names the Unix socket \"{path}\", not an absolute path"),
            "write it from the root: unix:///run/app.sock as an address (three slashes), /run/app.sock as http.unix_socket",
        ));
    }
    if path.len() > MAX_UNIX_PATH || path.contains('\0') {
        return Err(invalid(
            field,
            format!("names a Unix socket path of {} bytes", path.len()),
            &format!("a socket's path holds at most {MAX_UNIX_PATH} bytes: pick a shorter one"),
        ));
    }
    Ok(())
}

/// Turns weights into shares; the map's order (by name) is the class order.
pub(crate) fn shares<T>(
    field: &str,
    ops: &BTreeMap<String, T>,
    weight: impl Fn(&T) -> f64,
    invalid: &Invalid,
) -> Result<Vec<f64>, ScenarioError> {
    if ops.len() > 64 {
        return Err(invalid(
            field,
            format!("has {} classes", ops.len()),
            "use at most 64 operation classes",
        ));
    }
    for (name, op) in ops {
        let w = weight(op);
        if !(w.is_finite() && w > 0.0) {
            return Err(invalid(
                &format!("{field}.{name}.weight"),
                format!("is {w}"),
                "give a positive weight, e.g. 50",
            ));
        }
    }
    let total: f64 = ops.values().map(&weight).sum();
    Ok(ops.values().map(|op| weight(op) / total).collect())
}

/// `host:port` of a `ws://host:port/path` or `wss://…` address (the part a TCP connection
/// goes to).
pub fn ws_authority(address: &str) -> &str {
    let rest = address
        .strip_prefix("ws://")
        .or_else(|| address.strip_prefix("wss://"))
        .unwrap_or(address);
    rest.split(['/', '?']).next().unwrap_or(rest)
}

/// Checks the TLS options of a section (`http`, `ticks`): they need a TLS address (`secure`),
/// the CA file must be readable, and verifying against it and skipping verification exclude
/// each other.
pub(crate) fn check_tls_options(
    section: &str,
    secure: bool,
    (ca_file, insecure): (Option<&str>, bool),
    invalid: &Invalid,
) -> Result<(), ScenarioError> {
    let field = |key: &str| format!("{section}.{key}");
    if !secure && (ca_file.is_some() || insecure) {
        let key = if insecure { "insecure" } else { "ca_file" };
        return Err(invalid(
            &field(key),
            "is given for an address without TLS".into(),
            "TLS options apply to https:// and wss:// addresses; remove it or use TLS",
        ));
    }
    let Some(path) = ca_file else {
        return Ok(());
    };
    if insecure {
        return Err(invalid(
            &field("ca_file"),
            "is given with insecure = true".into(),
            "verify against the CA file or skip verification, not both",
        ));
    }
    std::fs::metadata(path).map(|_| ()).map_err(|e| {
        invalid(
            &field("ca_file"),
            format!("is \"{path}\", which cannot be read ({e})"),
            "give a PEM file of CA certificates (relative paths start where msgbench runs)",
        )
    })
}

/// Checks `ws://host:port[/path]` without resolving it.
pub fn check_ws_address(
    field: &str,
    address: &str,
    invalid: &Invalid,
) -> Result<(), ScenarioError> {
    let example = if field.starts_with("ticks") {
        "ws://127.0.0.1:9000/ticks"
    } else {
        "ws://127.0.0.1:8546/"
    };
    let bad = || {
        invalid(
            field,
            format!("is \"{address}\", not a ws:// or wss:// address with a port"),
            &format!(
                "write it like \"{example}\" (or wss://host:443/path over TLS){}",
                if field.starts_with("ticks") {
                    "; an event stream or a gRPC stream is http:// or https://"
                } else {
                    ""
                }
            ),
        )
    };
    if !address.starts_with("ws://") && !address.starts_with("wss://") {
        return Err(bad());
    }
    check_address(field, ws_authority(address), invalid).map_err(|_| bad())
}

/// Checks what every built-in WebSocket server has: `(threads, pin, max_frame,
/// max_connections)` under `prefix` (`ticks.server`).
pub(crate) fn check_ws_server(
    prefix: &str,
    (threads, pin, max_frame, max_connections): (u32, &[usize], u32, u32),
    limits: &MachineLimits,
    invalid: &Invalid,
) -> Result<(), ScenarioError> {
    if threads == 0 || threads > 64 {
        return Err(invalid(
            &format!("{prefix}.threads"),
            format!("is {threads}"),
            "use 1 to 64 server threads",
        ));
    }
    check_pins(
        &format!("{prefix}.pin"),
        "server",
        pin,
        threads,
        limits,
        invalid,
    )?;
    if !(1024..=64 << 20).contains(&max_frame) {
        return Err(invalid(
            &format!("{prefix}.max_frame"),
            format!("is {max_frame}"),
            "use 1 KiB to 64 MiB (browser reports need a few KiB)",
        ));
    }
    if max_connections == 0 {
        return Err(invalid(
            &format!("{prefix}.max_connections"),
            "is 0".into(),
            "allow at least 1 connection",
        ));
    }
    Ok(())
}

/// Helpers for the validation tests of every section.
#[cfg(test)]
pub(crate) mod testing {
    use super::{MachineLimits, ScenarioError};
    use crate::scenario::{Scenario, ScenarioSpec};

    /// Validates a scenario file on a machine with CPUs 0 and 1.
    pub fn validate(text: &str) -> Result<Scenario, ScenarioError> {
        let spec: ScenarioSpec = toml::from_str(text).expect("well-formed TOML of known keys");
        spec.validate("t.toml", &MachineLimits::cpus(vec![0, 1]))
    }

    /// The validated scenario; panics with the error when it is refused.
    pub fn valid(text: &str) -> Scenario {
        validate(text).unwrap_or_else(|e| panic!("refused: {e}"))
    }

    /// The field a scenario is refused for, and the whole message (which must name a fix).
    pub fn refused(text: &str) -> (String, String) {
        match validate(text) {
            Err(e @ ScenarioError::Invalid { .. }) => {
                let ScenarioError::Invalid { ref field, .. } = e else {
                    unreachable!()
                };
                (field.clone(), e.to_string())
            }
            other => panic!("expected a refusal, got {other:?}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::testing::refused;

    #[test]
    fn pins_name_one_cpu_per_thread_of_this_machine() {
        let (field, msg) = refused("system = \"rpc\"\n[client]\nthreads = 2\npin = [0]\n");
        assert_eq!(field, "client.pin");
        assert!(msg.contains("names 1 CPUs for 2 threads"), "{msg}");
        let (field, msg) = refused("system = \"rpc\"\n[client]\npin = [7]\n");
        assert_eq!(field, "client.pin");
        assert!(msg.contains("CPU 7") && msg.contains("[0, 1]"), "{msg}");
    }

    #[test]
    fn addresses_are_host_and_port() {
        let (field, _) = refused("system = \"redis\"\n[redis]\naddress = \"localhost\"\n");
        assert_eq!(field, "redis.address");
        let (field, _) = refused("system = \"ticks\"\n[ticks]\naddress = \"tcp://127.0.0.1:1/\"\n");
        assert_eq!(field, "ticks.address");
        // http:// is an event stream's: it needs the feed's schema.
        let (field, msg) =
            refused("system = \"ticks\"\n[ticks]\naddress = \"http://127.0.0.1:1/\"\n");
        assert_eq!(field, "ticks.feed");
        assert!(msg.contains("event stream"), "{msg}");
    }

    #[test]
    fn a_mix_needs_a_positive_weight() {
        let (field, _) =
            refused("system = \"rpc\"\n[rpc.ops.a]\nweight = 0\n[rpc.ops.b]\nweight = 0\n");
        assert_eq!(field, "rpc.ops.a.weight");
    }
}
