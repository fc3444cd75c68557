//! The threads of a run, laid out once: the workers that send (each says on its `done` sender
//! when it stopped sending, which ends the measured span) and the ones that only receive, all
//! on scoped threads named `msgbench-<name>`, with the system under test's CPU read over the
//! span they mark ([`SpanCpu::over_workers`]). Drivers build their workers; this runs them.
use super::span::SpanCpu;
use super::timeline::Timeline;
use std::sync::mpsc::{channel, Sender};
use std::thread::Result as Joined;

/// What the threads returned, each as joined (a panic is an `Err`), in the order given, and
/// the system under test's CPU seconds over the span.
pub struct Ran<A, B> {
    /// The sending workers' results.
    pub senders: Vec<Joined<A>>,
    /// The receiving workers' results.
    pub receivers: Vec<Joined<B>>,
    /// The system under test's CPU over the measured span, when it can be read.
    pub sut_cpu_s: Option<f64>,
}

/// Runs `senders` (each handed its `done` sender) and `receivers` until they all return.
pub fn run_threads<A, B, S, R>(
    timeline: &Timeline,
    sut_cpu_ns: &dyn Fn() -> Option<u64>,
    senders: Vec<(String, S)>,
    receivers: Vec<(String, R)>,
) -> Ran<A, B>
where
    A: Send,
    B: Send,
    S: FnOnce(Sender<()>) -> A + Send,
    R: FnOnce() -> B + Send,
{
    let (done_tx, done_rx) = channel::<()>();
    std::thread::scope(|s| {
        let spawn = |name: String| std::thread::Builder::new().name(format!("msgbench-{name}"));
        let sending: Vec<_> = senders
            .into_iter()
            .map(|(name, work)| {
                let done = done_tx.clone();
                spawn(name)
                    .spawn_scoped(s, move || work(done))
                    .expect("spawning a thread")
            })
            .collect();
        drop(done_tx);
        let receiving: Vec<_> = receivers
            .into_iter()
            .map(|(name, work)| {
                spawn(name)
                    .spawn_scoped(s, work)
                    .expect("spawning a thread")
            })
            .collect();
        let sut_cpu_s = SpanCpu::new(sut_cpu_ns).over_workers(timeline, &done_rx, sending.len());
        Ran {
            senders: sending.into_iter().map(|h| h.join()).collect(),
            receivers: receiving.into_iter().map(|h| h.join()).collect(),
            sut_cpu_s,
        }
    })
}

/// No receiving workers (a driver whose senders also receive).
pub type NoReceivers = fn();
