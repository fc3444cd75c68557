//! Why a run could not be carried out: one error type for every system, driver and server
//! start-up, each variant naming the remedy.

/// Why a run could not be carried out.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// `sched_setaffinity` refused.
    #[error("cannot pin the {role} thread to CPU {cpu}: {source}; choose a CPU this process may use (see `taskset -p $$`)")]
    Pin {
        /// Thread role.
        role: &'static str,
        /// The CPU.
        cpu: usize,
        /// OS error.
        source: std::io::Error,
    },
    /// A worker thread panicked (a bug in msgbench).
    #[error(
        "the {0} thread panicked; this is a bug in msgbench, please report it with the scenario"
    )]
    WorkerPanicked(&'static str),
    /// The server did not accept a connection.
    #[error(
        "cannot connect to {address}: {source}; is the server running and listening there? {hint}"
    )]
    Connect {
        /// The address.
        address: String,
        /// OS error.
        source: std::io::Error,
        /// How to get a server there.
        hint: String,
    },
    /// An address did not resolve.
    #[error("cannot resolve `{0}` to an address; write it as host:port, e.g. 127.0.0.1:6379")]
    Resolve(String),
    /// The external server process could not be started or did not become ready.
    #[error("system under test `{command}`: {problem}")]
    Sut {
        /// Its command.
        command: String,
        /// What went wrong.
        problem: String,
    },
    /// The TLS handshake failed (or TLS could not be set up): an HTTP/1.1 or byte-stream run.
    #[error("cannot open a TLS connection to {address}: {problem}")]
    Tls {
        /// The address.
        address: String,
        /// What went wrong, and the fix where the bytes said it (a plain port).
        problem: String,
    },
    /// The server refused the credentials a connection logged in with (`[redis.auth]`).
    #[error("the server at {address} refused msgbench's login: {problem}; check the user and the password (or the file or variable it is read from) in the scenario's auth section ([redis.auth] for the redis system; a server started with --requirepass alone takes no user, or user = \"default\")")]
    Login {
        /// The address.
        address: String,
        /// The server's words.
        problem: String,
    },
    /// The peer accepted TCP but is not a WebSocket server, or refused the upgrade.
    #[error("cannot open a WebSocket to {address}: {problem}")]
    Handshake {
        /// The address.
        address: String,
        /// What went wrong.
        problem: String,
    },
    /// A local socket could not be bound (a UDP feed's port).
    #[error("{problem} {hint}")]
    Bind {
        /// Where and why.
        problem: String,
        /// What to check.
        hint: String,
    },
    /// The peer accepted TCP but answered an event stream's request with no event stream (or
    /// its TLS handshake failed).
    #[error("cannot open an event stream (Server-Sent Events) at {address}: {problem}")]
    EventStream {
        /// The URL.
        address: String,
        /// What went wrong.
        problem: String,
    },
    /// The peer accepted TCP but does not speak HTTP/2 (or refused it in ALPN, or the TLS
    /// handshake failed).
    #[error("cannot open an HTTP/2 connection to {address}: {problem}")]
    Http2 {
        /// The URL.
        address: String,
        /// What went wrong.
        problem: String,
    },
    /// The broker accepted TCP but refused the opening or a subscription, or does not speak
    /// its protocol.
    #[error("{broker} broker at {address}: {problem}")]
    Broker {
        /// The address.
        address: String,
        /// Which broker it should be.
        broker: &'static str,
        /// What went wrong.
        problem: String,
    },
    /// A browser client could not be started or did not connect.
    #[error("browser client: {0}")]
    Browser(String),
    /// The user's queue library could not be loaded or made no queue (`queue.ring = "library"`).
    #[error("{0}; see docs/own-queue.md")]
    QueueLibrary(String),
    /// The built-in server could not start.
    #[error("cannot start the built-in server: {0}")]
    Server(std::io::Error),
    /// An OS call of the event loop failed.
    #[error("event loop: {0}")]
    Io(std::io::Error),
}
