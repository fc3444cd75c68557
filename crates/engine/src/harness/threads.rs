//! The threads of a run, laid out once: the workers that send (each says on its `done` sender
//! when it stopped sending, which ends the measured span) and the ones that only receive, all
//! on scoped threads named `msgbench-<name>`, with the system under test's CPU read over the
//! span they mark ([`SpanCpu::over_workers`]). Drivers build their workers; this runs them —
//! [`run_threads`] when they are connected before they are spawned, [`run_after_ready`] when
//! each connects on its own thread and the run starts once all have.
use super::span::SpanCpu;
use super::timeline::Timeline;
use crate::error::EngineError;
use crate::recorder::{Collector, LiveCallback, Recorder, Recording};
use msgbench_model::scenario::RunSettings;
use std::sync::mpsc::{channel, Receiver, Sender};
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

/// What a worker is handed once every worker said it is ready: the run's timeline and its
/// recorder.
pub type Start = (Timeline, Recorder);

/// What a worker of [`run_after_ready`] is given: where it says it is ready (or why it cannot
/// be), where its [`Start`] comes, and where it says it stopped sending.
pub struct Handshake {
    /// Its readiness: `Ok` once connected, the first `Err` fails the run before it starts.
    pub ready: Sender<Result<(), EngineError>>,
    /// Its start, once every worker is ready (closed: the run will not start).
    pub start: Receiver<Start>,
    /// Says when it stopped sending, which ends the measured span.
    pub done: Sender<()>,
}

/// The run of [`run_after_ready`]: what its workers are recorded as.
pub struct ReadyRun<'a> {
    /// The run's settings (its timeline and collector are made from them).
    pub run: &'a RunSettings,
    /// Operation classes the recorders count.
    pub classes: usize,
    /// Live figures for a progress line.
    pub live: Option<LiveCallback>,
    /// What a panicking worker is called.
    pub role: &'static str,
}

/// What [`run_after_ready`] ran: the timeline it started, what the collector merged, what each
/// worker returned (as joined, in order) and the system under test's CPU over the span.
pub struct ReadyRan<A> {
    /// The run's timeline, started once every worker was ready.
    pub timeline: Timeline,
    /// What the collector merged.
    pub recording: Recording,
    /// What each worker returned, as joined (a panic is an `Err`), in the order given.
    pub workers: Vec<Joined<A>>,
    /// The system under test's CPU over the measured span, when it can be read.
    pub sut_cpu_s: Option<f64>,
}

/// What a run of [`run_around`] does around its workers besides starting them. The default
/// does nothing more and ends the measured span when every worker said it stopped sending
/// ([`SpanCpu::over_workers`]); a run with more to start and watch than its threads (`ticks`:
/// browsers, its built-in server's schedule, Ctrl-C ending that schedule early) says so here.
pub trait Around {
    /// Every worker is ready: the last step before the timeline starts. An error fails the run
    /// as a worker that cannot get ready does.
    fn before_start(&mut self) -> Result<(), EngineError> {
        Ok(())
    }
    /// The run will not start (a worker or [`Around::before_start`] failed): said before the
    /// workers are joined, so those still getting ready can give up early.
    fn called_off(&mut self) {}
    /// The timeline is fixed and the collector made, before any worker is handed its start:
    /// take more recorders, keep the collector off a CPU, start what else runs.
    fn starting(&mut self, _timeline: &Timeline, _collector: &mut Collector) {}
    /// Watches the run until every worker's thread ended (`watch.done` disconnected) or, by
    /// default, said it stopped sending; the system under test's CPU over the measured span.
    fn watch(&mut self, timeline: &Timeline, watch: Watch<'_>) -> Option<f64> {
        (watch.cpu).over_workers(timeline, watch.done, watch.workers)
    }
}

/// What [`Around::watch`] is given.
pub struct Watch<'a> {
    /// Reads the system under test's CPU at the span's edges.
    pub cpu: SpanCpu<'a>,
    /// Each worker's `done`: a message when it stopped sending, disconnected once all ended.
    pub done: &'a Receiver<()>,
    /// How many workers there are.
    pub workers: usize,
}

/// Nothing around the workers: [`Around`]'s defaults.
pub struct Plain;

impl Around for Plain {}

/// [`run_around`] with nothing around the workers.
pub fn run_after_ready<A, W>(
    plan: ReadyRun<'_>,
    sut_cpu_ns: &dyn Fn() -> Option<u64>,
    workers: Vec<(String, W)>,
    recorder_for: &mut dyn FnMut(&mut Collector, usize) -> Recorder,
) -> Result<ReadyRan<A>, EngineError>
where
    A: Send,
    W: FnOnce(Handshake) -> A + Send,
{
    run_around(plan, sut_cpu_ns, workers, recorder_for, &mut Plain)
}

/// Runs `workers` that get ready first (connect, prepare their threads) and only then start:
/// once every one said it is ready (and `around` is, [`Around::before_start`]), the timeline
/// starts, each is handed it with its recorder (`recorder_for(collector, worker)`), and
/// `around` watches the span ([`Around::watch`]). The first worker that cannot get ready
/// fails the run before the timeline starts: the others find their start closed and end.
pub fn run_around<A, W>(
    plan: ReadyRun<'_>,
    sut_cpu_ns: &dyn Fn() -> Option<u64>,
    workers: Vec<(String, W)>,
    recorder_for: &mut dyn FnMut(&mut Collector, usize) -> Recorder,
    around: &mut dyn Around,
) -> Result<ReadyRan<A>, EngineError>
where
    A: Send,
    W: FnOnce(Handshake) -> A + Send,
{
    let count = workers.len();
    let (ready_tx, ready_rx) = channel();
    let (done_tx, done_rx) = channel::<()>();
    std::thread::scope(|s| {
        let mut starts = Vec::with_capacity(count);
        let mut handles = Vec::with_capacity(count);
        for (name, work) in workers {
            let (start_tx, start) = channel::<Start>();
            starts.push(start_tx);
            let (ready, done) = (ready_tx.clone(), done_tx.clone());
            let handle = std::thread::Builder::new()
                .name(format!("msgbench-{name}"))
                .spawn_scoped(s, move || work(Handshake { ready, start, done }))
                .expect("spawning a thread");
            handles.push(handle);
        }
        drop((ready_tx, done_tx));
        let ready = all_ready(&ready_rx, count, plan.role).and_then(|()| around.before_start());
        if let Err(e) = ready {
            around.called_off();
            drop(starts); // every worker sees a closed channel and stops
            for h in handles {
                let _ = h.join();
            }
            return Err(e);
        }
        let timeline = Timeline::from_now(plan.run);
        let mut collector = timeline.collector(plan.run, plan.classes, count);
        around.starting(&timeline, &mut collector);
        for (t, start) in starts.iter().enumerate() {
            let _ = start.send((timeline, recorder_for(&mut collector, t)));
        }
        let collecting = collector.start(plan.live);
        let watch = Watch {
            cpu: SpanCpu::new(sut_cpu_ns),
            done: &done_rx,
            workers: count,
        };
        let sut_cpu_s = around.watch(&timeline, watch);
        let workers = handles.into_iter().map(|h| h.join()).collect();
        // The collector ends once every recorder has, error or not.
        let recording = collecting
            .join()
            .map_err(|_| EngineError::WorkerPanicked("collector"))?;
        Ok(ReadyRan {
            timeline,
            recording,
            workers,
            sut_cpu_s,
        })
    })
}

/// Waits until `workers` threads said they are ready; the first failure wins.
fn all_ready(
    ready: &Receiver<Result<(), EngineError>>,
    workers: usize,
    role: &'static str,
) -> Result<(), EngineError> {
    for _ in 0..workers {
        match ready.recv() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return Err(e),
            Err(_) => return Err(EngineError::WorkerPanicked(role)),
        }
    }
    Ok(())
}
