//! Request/response runs over Unix domain sockets (`unix:///path`): the built-in RPC and HTTP
//! servers and a real Redis, each listening on a socket in a temporary folder, with the
//! accounting asserted on real runs; a socket nothing listens on is one clear error.
mod common;

use common::{assert_accounted, run, try_run};
use msgbench_engine::net::endpoint::Endpoint;
use msgbench_engine::server::rpc::RpcServer;
use msgbench_model::rpc::RpcServerConfig;
use std::path::Path;
use std::time::{Duration, Instant};

fn unix(path: &Path) -> String {
    format!("unix://{}", path.display())
}

#[test]
fn an_rpc_run_over_a_unix_socket_is_accounted_and_pipelined() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rpc.sock");
    let server =
        RpcServer::start_on(&RpcServerConfig::default(), &Endpoint::Unix(path.clone())).unwrap();
    assert_eq!(server.endpoint(), &Endpoint::Unix(path.clone()));
    let toml = format!(
        "system = \"rpc\"\n[run]\nduration = \"500ms\"\nwarmup = \"100ms\"\n[client]\nconnections = 2\nwindow = 16\n[pacing]\nmode = \"rate\"\nper_sec = 20000\n[rpc]\naddress = \"{}\"\n",
        unix(&path)
    );
    let r = &run(&toml, &[])[0];
    assert_accounted(r);
    assert!(r.counters.delivered > 5_000, "{:?}", r.counters);
    assert_eq!(r.counters.failed, 0, "{:?}", r.faults);
    assert!(r.config.contains("unix://"), "{}", r.config);
    drop(server);
    assert!(!path.exists(), "the server removes its socket");
}

#[test]
fn an_http_run_reaches_the_builtin_server_on_its_unix_socket() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("http.sock");
    let server = msgbench_engine::server::http::start_on(
        &RpcServerConfig::default(),
        Default::default(),
        &Endpoint::Unix(path.clone()),
    )
    .unwrap();
    let toml = format!(
        "system = \"http\"\n[run]\nduration = \"500ms\"\nwarmup = \"100ms\"\n[client]\nconnections = 2\nwindow = 4\n[pacing]\nmode = \"rate\"\nper_sec = 5000\n[http]\nurl = \"http://localhost/?bytes=64\"\nunix_socket = \"{}\"\n",
        path.display()
    );
    let r = &run(&toml, &[])[0];
    assert_accounted(r);
    assert!(r.counters.delivered > 1_500, "{:?}", r.counters);
    assert_eq!(r.counters.failed, 0, "{:?}", r.faults);
    drop(server);
}

/// `redis-server` listening only on a Unix socket in `dir` (TCP off), stopped by PID when
/// dropped.
struct UnixRedis(std::process::Child);

impl UnixRedis {
    fn start(path: &Path) -> UnixRedis {
        let program = ["/usr/bin/redis-server", "redis-server"]
            .into_iter()
            .find(|p| Path::new(p).exists())
            .unwrap_or("redis-server");
        let child = std::process::Command::new(program)
            .args(["--port", "0", "--save", "", "--appendonly", "no"])
            .arg("--unixsocket")
            .arg(path)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap_or_else(|e| {
                panic!("cannot start {program}: {e} (run `bash scripts/setup.sh`)")
            });
        let deadline = Instant::now() + Duration::from_secs(20);
        while !Endpoint::Unix(path.into()).accepts() {
            assert!(
                Instant::now() < deadline,
                "redis did not listen on {path:?}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        UnixRedis(child)
    }
}

impl Drop for UnixRedis {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn redis_on_its_unix_socket_is_measured_with_its_commands_and_keys() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("redis.sock");
    let _redis = UnixRedis::start(&path);
    let toml = format!(
        "system = \"redis\"\n[run]\nduration = \"500ms\"\nwarmup = \"100ms\"\n[client]\nconnections = 2\nwindow = 8\n[pacing]\nmode = \"rate\"\nper_sec = 10000\n[redis]\naddress = \"{}\"\nkeys = 1000\n[redis.ops.set]\ncommand = [\"SET\", \"k:{{key}}\", \"{{data}}\"]\n[redis.ops.get]\ncommand = [\"GET\", \"k:{{key}}\"]\n",
        unix(&path)
    );
    let r = &run(&toml, &[])[0];
    assert_accounted(r);
    assert!(r.counters.delivered > 3_000, "{:?}", r.counters);
    assert_eq!(r.counters.failed, 0, "{:?}", r.faults);
    assert_eq!(r.classes.len(), 2);
}

#[test]
fn a_unix_socket_nothing_listens_on_is_one_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("nobody.sock");
    let toml = format!(
        "system = \"rpc\"\n[run]\nduration = \"200ms\"\nwarmup = \"0s\"\n[rpc]\naddress = \"{}\"\n",
        unix(&path)
    );
    let (outcome, _dir) = try_run(&toml, &[]);
    let Err(e) = outcome else {
        panic!("a run with no server succeeded")
    };
    let e = e.to_string();
    assert!(
        e.contains(&format!("cannot connect to {}", unix(&path))),
        "{e}"
    );
}
