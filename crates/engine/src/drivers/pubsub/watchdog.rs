//! The opening's watchdog. Every read of an opening is bounded by [`super::opening::OPEN_TIMEOUT`],
//! but a broker that answers a byte at a time restarts that bound with each byte and held an
//! opening for ever; and a blocked read does not see Ctrl-C (Kafka's `read_exact` retries on
//! `EINTR`). So every connection of the opening is watched here: when the opening makes no
//! progress — no new connection, no answered request of a long wait on one (Kafka's group
//! join: [`Watchdog::progress`]) — for `pubsub.open_timeout`, or Ctrl-C comes, each one is shut
//! down, which ends a blocked read at once, and the opening fails with the watchdog's reason
//! instead of the read's.
use std::net::{Shutdown, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How often the watchdog looks at the clock and the stop flag (Ctrl-C ends an opening well
/// within a second).
const WATCH_EVERY: Duration = Duration::from_millis(20);

struct Watched {
    /// A duplicate of each connection opened so far (shutting it down shuts the original).
    sockets: Vec<TcpStream>,
    /// The opening fails past this: its last progress + the lifetime.
    deadline: Instant,
    /// Why the opening was cut (the first reason).
    cut: Option<String>,
    /// The opening ended: nothing more is cut, the connections are the run's.
    over: bool,
}

/// Watches one run's opening; dropping it ends the watch.
pub struct Watchdog {
    watched: Arc<Mutex<Watched>>,
    lifetime: Duration,
    thread: Option<JoinHandle<()>>,
}

impl Watchdog {
    /// Starts watching: the opening fails once it goes `lifetime` without progress (a new
    /// connection, [`Watchdog::progress`]), or when `stop` is raised.
    pub fn start(stop: Arc<AtomicBool>, lifetime: Duration) -> Watchdog {
        let watched = Arc::new(Mutex::new(Watched {
            sockets: Vec::new(),
            deadline: Instant::now() + lifetime,
            cut: None,
            over: false,
        }));
        let thread = {
            let watched = watched.clone();
            std::thread::Builder::new()
                .name("msgbench-opening-watch".into())
                .spawn(move || watch(&watched, &stop, lifetime))
                .expect("spawning a thread")
        };
        Watchdog {
            watched,
            lifetime,
            thread: Some(thread),
        }
    }

    /// Watches `stream` from now on; a new connection is progress (the lifetime starts again).
    pub fn watch(&self, stream: &TcpStream) {
        let Ok(copy) = stream.try_clone() else {
            return;
        };
        let mut w = lock(&self.watched);
        if w.over {
            return;
        }
        if w.cut.is_some() {
            let _ = copy.shutdown(Shutdown::Both);
        }
        w.sockets.push(copy);
        drop(w);
        self.progress();
    }

    /// The opening made progress without a new connection (an answered request of a long
    /// wait on one: Kafka's group join, its topics' leaders): the lifetime starts again.
    pub fn progress(&self) {
        let mut w = lock(&self.watched);
        if w.cut.is_none() && !w.over {
            w.deadline = Instant::now() + self.lifetime;
        }
    }

    /// Why the opening was cut, if it was.
    pub fn cut(&self) -> Option<String> {
        lock(&self.watched).cut.clone()
    }

    /// The opening is over: its connections are the run's, nothing more is watched (a
    /// connection opened after it — Kafka's leaving its group — is bounded by its reads).
    pub fn opened(&self) {
        let mut w = lock(&self.watched);
        w.over = true;
        w.sockets.clear();
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        self.opened();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn lock(watched: &Mutex<Watched>) -> MutexGuard<'_, Watched> {
    watched.lock().unwrap_or_else(|e| e.into_inner())
}

fn watch(watched: &Mutex<Watched>, stop: &AtomicBool, lifetime: Duration) {
    loop {
        let mut w = lock(watched);
        if w.over {
            return;
        }
        let why = if stop.load(Ordering::Relaxed) {
            Some("interrupted (Ctrl-C) during the opening".to_string())
        } else if Instant::now() >= w.deadline {
            Some(format!(
                "the opening made no progress for {} s (a connection's handshake or subscription still unanswered: a broker that answers, but too slowly to finish)",
                lifetime.as_secs()
            ))
        } else {
            None
        };
        if let Some(why) = why {
            w.cut.get_or_insert(why);
            for s in &w.sockets {
                let _ = s.shutdown(Shutdown::Both);
            }
        }
        drop(w);
        std::thread::sleep(WATCH_EVERY);
    }
}
