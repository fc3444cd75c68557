//! When the requests of one connection go, whatever carries the bytes (`rpc` and `redis` over
//! a byte stream, `ws-rpc` through a WebSocket socket thread): the pacer says when each request
//! is due, [`InFlight`] holds the requests in flight, and `client.when_full` decides what a due
//! request does when the connection's window (`client.window` requests in flight) is full:
//!
//! * [`block`]: it waits for a response; the wait is latency, since latency counts from the
//!   intended send time;
//! * [`skip`]: it is attempted and counted as skipped;
//! * [`adapt`]: as `skip`, and the connection's rate halves; every 100 ms without a full window
//!   5 % of the target comes back (AIMD). Slots the thinned schedule leaves out are not
//!   attempts.
//!
//! Each policy is one small function of the connection's state; [`Launcher::send_due`] applies
//! it to every due slot and keeps the measured span's accounting through a [`Tally`].
use super::in_flight::InFlight;
use crate::clock::Clock;
use crate::pacer::Pacer;
use crate::recorder::Recorder;
use msgbench_model::client::ClientConfig;
use msgbench_model::pacing::Pacing;
use msgbench_model::result::SkipCause;
use msgbench_model::when_full::WhenFull;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

/// `adapt`: rate added back per step without a full window, as a share of the target.
const ADAPT_STEP: f64 = 0.05;
/// `adapt`: length of that step.
const ADAPT_STEP_NS: u64 = 100_000_000;
/// `adapt`: lowest share of the target a connection slows down to.
const ADAPT_FLOOR: f64 = 1.0 / 1024.0;
/// `adapt`: the rate halves at most once in this long. Every slot that comes due while the
/// window is full is evidence of the *same* overload until the halved rate has had time to
/// show; halving at each of them (as TCP would if it halved per lost segment, not per loss
/// event) turned a 1 ms scheduler stall at 30k/s into 30 halvings, the rate at 1/1000 of the
/// target and two seconds to climb back. 10 ms is far above a loopback round trip and far
/// below the 100 ms step, so sustained overload still halves ten times a step.
const ADAPT_HALVE_NS: u64 = 10_000_000;
/// How late past the span's end a due request may still go under `block`. A loop that wakes a
/// little late for the last slots is not a backlog; beyond this, what was due and never sent (a
/// window held full) is counted as skipped, so that a run ends on time: a 1 s run against a
/// server 16× too slow took 16 s before, sending its backlog.
pub const LATE_SEND_GRACE_NS: u64 = 10_000_000;

/// Only `block` can hold a backlog without bound (a full window); `skip` and `adapt` shed
/// what the window cannot take. (`drop` is the queue's; validation refuses it for a client.)
fn holds_backlog(client: &ClientConfig) -> bool {
    matches!(client.when_full, WhenFull::Block | WhenFull::Drop)
}

/// What every connection's launcher shares.
pub struct Rules<'a> {
    /// Client settings (window, when full, …).
    pub client: &'a ClientConfig,
    /// Share of each operation class in the mix.
    pub shares: &'a [f64],
    /// Start of the measured span.
    pub measure_start_ns: u64,
    /// End of the schedule.
    pub end_ns: u64,
}

/// The measured span's budget of one driver thread (`run.operations`).
#[derive(Debug, Clone, Copy)]
pub struct Budget {
    /// Most measured attempts.
    pub limit: u64,
    /// Measured attempts so far.
    pub used: u64,
}

impl Budget {
    /// A budget of `limit` measured attempts (`None`: no limit).
    pub fn new(limit: Option<u64>) -> Budget {
        Budget {
            limit: limit.unwrap_or(u64::MAX),
            used: 0,
        }
    }

    /// The budget of a driver thread owning the local connections `local`: the sum of their
    /// shares of `ops` (see [`msgbench_model::shard`]: each connection's share follows its
    /// run-wide index, so a shard's budgets add up to exactly its slice of the run's).
    pub fn of_connections(
        ops: Option<u64>,
        client: &ClientConfig,
        local: std::ops::Range<usize>,
    ) -> Budget {
        Budget::new(ops.map(|_| {
            local
                .map(|l| connection_budget(ops, client, l).unwrap_or(0))
                .sum()
        }))
    }
    /// The budget is spent.
    #[inline]
    pub fn spent(&self) -> bool {
        self.used >= self.limit
    }
}

/// Local connection `local`'s share of the run's operation budget `ops`.
pub fn connection_budget(ops: Option<u64>, client: &ClientConfig, local: usize) -> Option<u64> {
    msgbench_model::shard::budget_of(ops, client.total_connections(), client.global_index(local))
}

/// A connection's own budget in front of its thread's tally: the thread's is the sum of its
/// connections', so either being spent stops the connection.
struct Budgeted<'a, T> {
    budget: &'a mut Budget,
    inner: &'a mut T,
}

impl<T: Tally> Tally for Budgeted<'_, T> {
    #[inline]
    fn spent(&self) -> bool {
        self.budget.spent() || self.inner.spent()
    }
    #[inline]
    fn attempted(&mut self) {
        self.budget.used += 1;
        self.inner.attempted();
    }
    #[inline]
    fn skipped(&mut self, why: SkipCause) {
        self.inner.skipped(why);
    }
    #[inline]
    fn sent(&mut self, scheduled_ns: u64, actual_ns: u64) {
        self.inner.sent(scheduled_ns, actual_ns);
    }
    fn held_by_window(&mut self) {
        self.inner.held_by_window();
    }
    fn never_sent(&mut self, intended_ns: u64, now_ns: u64) {
        self.inner.never_sent(intended_ns, now_ns);
    }
}

/// Where a launcher counts what it did with the measured span's requests.
pub trait Tally {
    /// The thread's operation budget is spent.
    fn spent(&self) -> bool;
    /// A measured request was due (it takes one unit of the budget).
    fn attempted(&mut self);
    /// A measured request was not sent, for this reason.
    fn skipped(&mut self, why: SkipCause);
    /// A measured request went at `actual_ns`; its slot was `scheduled_ns`.
    fn sent(&mut self, scheduled_ns: u64, actual_ns: u64);
    /// The request just sent had waited for room in a full window (`block`).
    fn held_by_window(&mut self);
    /// A measured request due at `intended_ns` was never sent: by `now_ns` the run ended (it
    /// is also skipped). Its wait is a lower bound on its latency.
    fn never_sent(&mut self, intended_ns: u64, now_ns: u64);
}

/// The driver thread's tally: its budget and its recorder.
pub struct Counting<'a> {
    /// The thread's share of `run.operations`.
    pub budget: &'a mut Budget,
    /// The thread's recorder.
    pub rec: &'a mut Recorder,
}

impl Tally for Counting<'_> {
    #[inline]
    fn spent(&self) -> bool {
        self.budget.spent()
    }
    #[inline]
    fn attempted(&mut self) {
        self.budget.used += 1;
        self.rec.attempted();
    }
    #[inline]
    fn skipped(&mut self, why: SkipCause) {
        self.rec.skipped(why);
    }
    #[inline]
    fn sent(&mut self, scheduled_ns: u64, actual_ns: u64) {
        self.rec.sent(scheduled_ns, actual_ns);
    }
    fn held_by_window(&mut self) {
        self.rec.held_by_window();
    }
    fn never_sent(&mut self, intended_ns: u64, now_ns: u64) {
        self.rec.unanswered(intended_ns, now_ns);
    }
}

/// One request to send now.
#[derive(Debug, Clone, Copy)]
pub struct Launch {
    /// Operation class.
    pub class: usize,
    /// Its id in the connection's [`InFlight`].
    pub id: u64,
    /// When it goes.
    pub sent_ns: u64,
    /// When it was meant to go (its schedule's time; `sent_ns` without one).
    pub intended_ns: u64,
}

/// What a due request does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Goes now.
    Send,
    /// Is attempted and not sent (counted as skipped).
    Skip,
    /// Stays due until the window has room (nothing is counted yet).
    Wait,
    /// Is left out of a thinned schedule (`adapt`): not an attempt.
    Thin,
}

/// `block`: a due request waits for room, unless the connection is down (then it is skipped:
/// nothing could take it).
pub fn block(full: bool, connected: bool) -> Decision {
    match (full || !connected, connected) {
        (false, _) => Decision::Send,
        (true, true) => Decision::Wait,
        (true, false) => Decision::Skip,
    }
}

/// `skip`: a due request that finds the window full (or the connection down) is skipped.
pub fn skip(full: bool, connected: bool) -> Decision {
    if full || !connected {
        Decision::Skip
    } else {
        Decision::Send
    }
}

/// `adapt` state of one connection: the share of the target it sends at.
#[derive(Debug, Clone, Copy)]
pub struct Adapt {
    share: f64,
    credit: f64,
    last_step_ns: u64,
    /// When the rate last halved (`None`: never).
    last_halved_ns: Option<u64>,
}

impl Adapt {
    /// Full rate from `t0_ns`.
    pub fn new(t0_ns: u64) -> Adapt {
        Adapt {
            share: 1.0,
            credit: 0.0,
            last_step_ns: t0_ns,
            last_halved_ns: None,
        }
    }

    /// The share of the target this connection sends at now.
    pub fn share(&self) -> f64 {
        self.share
    }
}

/// `adapt`: the rate comes back by [`ADAPT_STEP`] every [`ADAPT_STEP_NS`]; the schedule is
/// thinned to the current share; a full window skips the request and halves the share, at most
/// once per [`ADAPT_HALVE_NS`].
pub fn adapt(state: &mut Adapt, now: u64, full: bool, connected: bool) -> Decision {
    if now.saturating_sub(state.last_step_ns) >= ADAPT_STEP_NS {
        state.share = (state.share + ADAPT_STEP).min(1.0);
        state.last_step_ns = now;
    }
    state.credit += state.share;
    if state.credit < 1.0 {
        return Decision::Thin;
    }
    state.credit -= 1.0;
    let decision = skip(full, connected);
    // A connection being re-established says nothing about the server's capacity.
    if decision == Decision::Skip && connected {
        let halved_lately = state
            .last_halved_ns
            .is_some_and(|t| now.saturating_sub(t) < ADAPT_HALVE_NS);
        if !halved_lately {
            state.share = (state.share / 2.0).max(ADAPT_FLOOR);
            state.last_halved_ns = Some(now);
        }
        state.last_step_ns = now;
    }
    decision
}

/// Decides when the requests of one connection go: its pacer, its `adapt` state, its mix.
pub struct Launcher {
    /// The connection's schedule.
    pub pacer: Pacer,
    rng: SmallRng,
    adapt: Adapt,
    /// This connection's share of the run's operation budget.
    budget: Budget,
    /// No more sends: the schedule passed the span's end.
    pub done: bool,
    /// The last time a due slot found the window full (`block`), or a turn began with the
    /// window still full as the last one left it: every slot due by then waited for the
    /// window, so when it goes its lag is the system's pushback, not the driver's lateness
    /// (several may go in one turn once answers free the window).
    held_until_ns: Option<u64>,
    /// The last paced turn under `block` ended with the window full. (A driver's loop need not
    /// wake for slots that fall due then: it waits for answers, and the next turn sends them.)
    left_full: bool,
}

impl Launcher {
    /// The launcher of connection `index` of `total` (run-wide: a shard's connections keep
    /// their index in the whole run) on a schedule from `t0_ns`: rate pacing gives each
    /// connection an equal share of the rate, offset so that their union stays even; Poisson
    /// arrivals draw from a stream seeded by the index. `seed` is the run's (`run.seed`);
    /// `budget` is the connection's share of `run.operations`.
    pub fn new(
        pacing: Pacing,
        seed: u64,
        t0_ns: u64,
        (index, total): (usize, usize),
        budget: Option<u64>,
    ) -> Launcher {
        let (pacing, offset) = match pacing {
            Pacing::Rate { per_sec, arrivals } => (
                Pacing::Rate {
                    per_sec: per_sec / total as f64,
                    arrivals,
                },
                (1e9 / per_sec * index as f64) as u64,
            ),
            // Every `total`-th message of the whole schedule, from the `index`-th: the union
            // of the connections' schedules is the whole one, whatever the rate does.
            Pacing::Stages(mut profile) => {
                profile.part = (index as u64, total as u64);
                (Pacing::Stages(profile), 0)
            }
            p => (p, 0),
        };
        let seed = seed ^ (index as u64).wrapping_mul(0xA24B_AED4_963E_E407);
        Launcher {
            pacer: Pacer::new(pacing, t0_ns + offset, seed),
            rng: SmallRng::seed_from_u64(seed.wrapping_add(1)),
            adapt: Adapt::new(t0_ns),
            budget: Budget::new(budget),
            done: false,
            held_until_ns: None,
            left_full: false,
        }
    }

    /// When this connection next needs the loop's attention for sending (`None`: not before
    /// something else happens, e.g. a response frees the window).
    pub fn next_wake(&mut self, in_flight: &InFlight, rules: &Rules, now: u64) -> Option<u64> {
        if self.done {
            return None;
        }
        match self.pacer.upcoming_ns() {
            // Unpaced: send when the window has room; with a full window wait for a response.
            None => (!in_flight.is_full()).then_some(now).or(Some(rules.end_ns)),
            // A full window under `block` waits for a response, or for the span's end (plus
            // the grace) to give up on the backlog.
            Some(due) if due < rules.end_ns => Some(
                if rules.client.when_full != WhenFull::Block || !in_flight.is_full() {
                    due
                } else {
                    rules.end_ns + LATE_SEND_GRACE_NS
                },
            ),
            Some(due) => Some(due),
        }
    }

    /// Sends what is due at `now`: each request is opened in `in_flight` and handed to `send`.
    /// The connection is up again at `now`: what fell due while it was down and goes now
    /// waited for the system (its connection), not for the pacer — its send lag is the
    /// system's, as a full window's is.
    pub fn reconnected(&mut self, now: u64) {
        self.held_until_ns = Some(now);
    }

    /// `connected == false` skips what is due (a connection being re-established).
    pub fn send_due<C: Clock, T: Tally>(
        &mut self,
        in_flight: &mut InFlight,
        connected: bool,
        rules: &Rules,
        (now, clock): (u64, &C),
        tally: &mut T,
        mut send: impl FnMut(Launch),
    ) {
        if self.done {
            return;
        }
        self.budgeted(tally, |l, tally| {
            if l.pacer.upcoming_ns().is_none() {
                l.send_unpaced(in_flight, connected, now, rules, tally, &mut send);
            } else {
                if l.left_full {
                    l.held_until_ns = Some(now); // full since the last turn: all due waited
                }
                l.send_paced(in_flight, connected, now, rules, clock, tally, &mut send);
                l.left_full = holds_backlog(rules.client) && in_flight.is_full();
            }
        });
        // Its share of the budget spent, the connection sends no more: its loop must not keep
        // waking for slots it will not take while other connections finish theirs.
        if self.budget.spent() {
            self.done = true;
        }
    }

    /// Unpaced: keep the window full (`block`, `adapt`: a closed loop), or attempt a batch of
    /// `client.turn_batch` per turn of the loop and skip what does not fit (`skip`).
    fn send_unpaced<T: Tally>(
        &mut self,
        in_flight: &mut InFlight,
        connected: bool,
        now: u64,
        rules: &Rules,
        tally: &mut T,
        send: &mut impl FnMut(Launch),
    ) {
        if now >= rules.end_ns {
            self.done = true;
            return;
        }
        // Unpaced and disconnected: nothing is due, so nothing is attempted.
        if !connected {
            return;
        }
        let client = rules.client;
        let measured = now >= rules.measure_start_ns;
        let attempts = match client.when_full {
            WhenFull::Skip if !in_flight.is_full() => client.turn_batch,
            WhenFull::Skip => 0,
            _ => in_flight.room(),
        };
        for _ in 0..attempts {
            if tally.spent() {
                break;
            }
            if measured {
                tally.attempted();
            }
            if in_flight.is_full() {
                if measured {
                    tally.skipped(SkipCause::WindowFull);
                }
                continue;
            }
            let launch = self.open(in_flight, rules, now, now, measured);
            if measured {
                tally.sent(now, now);
            }
            send(launch);
        }
    }

    /// Paced: every slot due by `now` goes through the `when_full` policy.
    #[allow(clippy::too_many_arguments)]
    fn send_paced<C: Clock, T: Tally>(
        &mut self,
        in_flight: &mut InFlight,
        connected: bool,
        now: u64,
        rules: &Rules,
        clock: &C,
        tally: &mut T,
        send: &mut impl FnMut(Launch),
    ) {
        while let Some(due) = self.pacer.upcoming_ns() {
            if due >= rules.end_ns {
                self.done = true;
                return;
            }
            let measured = due >= rules.measure_start_ns;
            if due > now || (measured && tally.spent()) {
                return;
            }
            // What `skip` and `adapt` still have past the end is a loop that woke late and
            // may go.
            if holds_backlog(rules.client) && now >= rules.end_ns + LATE_SEND_GRACE_NS {
                return self.give_up_backlog(rules, clock, rules.end_ns, now, tally);
            }
            let full = in_flight.is_full();
            let decision = match rules.client.when_full {
                // `drop` is the queue's; validation refuses it for a client.
                WhenFull::Block | WhenFull::Drop => block(full, connected),
                WhenFull::Skip => skip(full, connected),
                WhenFull::Adapt => adapt(&mut self.adapt, now, full, connected),
            };
            if decision == Decision::Wait {
                self.held_until_ns = Some(now);
                return;
            }
            let slot = self.pacer.next(clock);
            let held = self.held_until_ns.is_some_and(|t| slot.scheduled_ns <= t);
            if measured && decision != Decision::Thin {
                tally.attempted();
            }
            match decision {
                Decision::Send => {
                    let launch =
                        self.open(in_flight, rules, slot.intended_ns, slot.actual_ns, measured);
                    if measured {
                        tally.sent(slot.scheduled_ns, slot.actual_ns);
                        if held {
                            tally.held_by_window();
                        }
                    }
                    send(launch);
                }
                Decision::Skip if measured => tally.skipped(if connected {
                    SkipCause::WindowFull
                } else {
                    SkipCause::NoConnection
                }),
                _ => {}
            }
        }
    }

    /// The run stopped early at `now` (an error under `on_error = "stop"`, Ctrl-C): under
    /// `block`, what was due by then and never sent goes as the span's end's backlog does —
    /// attempted, skipped (`run_ended`), each wait recorded as a lower bound. Mostly a full
    /// window held it (the server hung until the error that stopped the run); else those
    /// requests would be in no counter and their waits in no percentile. (`skip` and `adapt`
    /// keep no backlog: what fell due since the last turn is not counted.)
    pub fn give_up_due<C: Clock, T: Tally>(
        &mut self,
        rules: &Rules,
        (now, clock): (u64, &C),
        tally: &mut T,
    ) {
        if self.done || self.pacer.upcoming_ns().is_none() || !holds_backlog(rules.client) {
            return;
        }
        let until = now.saturating_add(1).min(rules.end_ns);
        self.budgeted(tally, |l, tally| {
            l.give_up_backlog(rules, clock, until, now, tally)
        });
    }

    /// Runs `f` with `tally` counting against this connection's share of the budget.
    fn budgeted<T: Tally>(&mut self, tally: &mut T, f: impl FnOnce(&mut Self, &mut Budgeted<T>)) {
        let mut budget = self.budget;
        let mut tally = Budgeted {
            budget: &mut budget,
            inner: tally,
        };
        f(self, &mut tally);
        self.budget = budget;
    }

    /// Requests due before `until_ns` are still unsent at `now` and never will be: each is
    /// attempted, skipped and its wait recorded as a lower bound; then nothing more goes.
    fn give_up_backlog<C: Clock, T: Tally>(
        &mut self,
        rules: &Rules,
        clock: &C,
        until_ns: u64,
        now: u64,
        tally: &mut T,
    ) {
        while let Some(due) = self.pacer.upcoming_ns() {
            if due >= until_ns {
                break;
            }
            let slot = self.pacer.next(clock);
            if due >= rules.measure_start_ns && !tally.spent() {
                tally.attempted();
                tally.skipped(SkipCause::RunEnded);
                tally.never_sent(slot.intended_ns, now);
            }
        }
        self.done = true;
    }

    /// Opens a request of a class drawn from the mix in `in_flight`.
    #[inline]
    fn open(
        &mut self,
        in_flight: &mut InFlight,
        rules: &Rules,
        intended_ns: u64,
        sent_ns: u64,
        measured: bool,
    ) -> Launch {
        let class = pick_class(rules.shares, &mut self.rng);
        let id = in_flight.open(class as u16, intended_ns, sent_ns, measured);
        Launch {
            class,
            id,
            sent_ns,
            intended_ns,
        }
    }
}

#[inline]
fn pick_class(shares: &[f64], rng: &mut SmallRng) -> usize {
    if shares.len() == 1 {
        return 0;
    }
    let mut r: f64 = rng.gen();
    for (i, s) in shares.iter().enumerate() {
        if r < *s {
            return i;
        }
        r -= s;
    }
    shares.len() - 1
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;
    use msgbench_model::client::OnError;
    use msgbench_model::pacing::Arrivals;

    /// Counts like the recorder does, without one.
    #[derive(Debug, Default)]
    struct Counted {
        limit: Option<u64>,
        attempted: u64,
        skipped: u64,
        causes: Vec<SkipCause>,
        sent: Vec<(u64, u64)>,
        never_sent: Vec<u64>,
        held: u64,
    }

    impl Tally for Counted {
        fn spent(&self) -> bool {
            self.limit.is_some_and(|l| self.attempted >= l)
        }
        fn attempted(&mut self) {
            self.attempted += 1;
        }
        fn skipped(&mut self, why: SkipCause) {
            self.skipped += 1;
            self.causes.push(why);
        }
        fn sent(&mut self, scheduled_ns: u64, actual_ns: u64) {
            self.sent.push((scheduled_ns, actual_ns));
        }
        fn held_by_window(&mut self) {
            self.held += 1;
        }
        fn never_sent(&mut self, intended_ns: u64, now_ns: u64) {
            self.never_sent.push(now_ns - intended_ns);
        }
    }

    fn client(when_full: WhenFull, window: usize) -> ClientConfig {
        ClientConfig {
            threads: 1,
            connections: 1,
            window,
            when_full,
            timeout_ns: 1_000_000_000,
            on_error: OnError::Stop,
            pin: Vec::new(),
            turn_batch: 1,
            spin_ns: 0,
            shard: msgbench_model::shard::Shard::WHOLE,
        }
    }

    /// 1000/s on one connection: a request every ms from t = 0, schedule to 1 s.
    fn per_ms() -> Pacing {
        Pacing::Rate {
            per_sec: 1000.0,
            arrivals: Arrivals::Uniform,
        }
    }

    struct Conn {
        launcher: Launcher,
        in_flight: InFlight,
        sent: Vec<Launch>,
    }

    impl Conn {
        fn new(pacing: Pacing, window: usize) -> Conn {
            Conn {
                launcher: Launcher::new(pacing, 1, 0, (0, 1), None),
                in_flight: InFlight::new(window),
                sent: Vec::new(),
            }
        }

        fn turn(
            &mut self,
            c: &ClientConfig,
            clock: &ManualClock,
            connected: bool,
            t: &mut Counted,
        ) {
            let rules = Rules {
                client: c,
                shares: &[1.0],
                measure_start_ns: 0,
                end_ns: 1_000_000_000,
            };
            let now = clock.now_ns();
            let sent = &mut self.sent;
            self.launcher.send_due(
                &mut self.in_flight,
                connected,
                &rules,
                (now, clock),
                t,
                |l| sent.push(l),
            );
        }
    }

    #[test]
    fn block_waits_and_the_wait_is_latency() {
        let (s, c) = (per_ms(), client(WhenFull::Block, 1));
        let clock = ManualClock::starting_at(0);
        let mut conn = Conn::new(s, 1);
        let mut t = Counted::default();
        conn.turn(&c, &clock, true, &mut t);
        clock.advance(3_500_000); // three more slots fall due while the window is full
        conn.turn(&c, &clock, true, &mut t);
        assert_eq!(
            (t.attempted, conn.sent.len()),
            (1, 1),
            "nothing counted while waiting"
        );
        let first = conn.in_flight.complete(conn.sent[0].id).unwrap();
        assert_eq!(first.intended_ns, 0);
        conn.turn(&c, &clock, true, &mut t);
        let second = conn.in_flight.complete(conn.sent[1].id).unwrap();
        assert_eq!(
            (second.intended_ns, second.sent_ns),
            (1_000_000, 3_500_000),
            "latency counts from the slot, not from when the window had room"
        );
        assert_eq!((t.attempted, t.skipped), (2, 0));
        // Its lag (2.5 ms) is the system's pushback, the first send's (none) the driver's.
        assert_eq!(t.held, 1, "the second send waited for the window");
        conn.turn(&c, &clock, true, &mut t); // the second is answered: the third goes
        assert_eq!(
            t.held, 2,
            "so did the third, due while the second was in flight"
        );
        conn.in_flight.complete(conn.sent[2].id).unwrap();
        conn.turn(&c, &clock, true, &mut t); // the slot at 3 ms, due at 3.5 ms behind it
        conn.in_flight.complete(conn.sent[3].id).unwrap();
        conn.turn(&c, &clock, true, &mut t); // an answer is taken in a turn: the window is free
        clock.advance(1_000_000);
        conn.turn(&c, &clock, true, &mut t);
        assert_eq!(
            (conn.sent.len(), t.held),
            (5, 3),
            "the slot at 4 ms found room"
        );
    }

    #[test]
    fn block_gives_up_its_backlog_when_the_span_ends_so_the_run_ends_on_time() {
        let (s, c) = (per_ms(), client(WhenFull::Block, 1));
        let clock = ManualClock::starting_at(0);
        let mut conn = Conn::new(s, 1);
        let mut t = Counted::default();
        conn.turn(&c, &clock, true, &mut t); // the slot at 0 goes and is never answered
        let rules_end = 1_000_000_000;
        let wake = conn.launcher.next_wake(
            &conn.in_flight,
            &Rules {
                client: &c,
                shares: &[1.0],
                measure_start_ns: 0,
                end_ns: rules_end,
            },
            clock.now_ns(),
        );
        assert_eq!(
            wake,
            Some(rules_end + LATE_SEND_GRACE_NS),
            "woken to give up"
        );
        clock.advance(rules_end + LATE_SEND_GRACE_NS);
        conn.turn(&c, &clock, true, &mut t);
        assert!(conn.launcher.done);
        assert_eq!(conn.sent.len(), 1, "nothing goes after the span");
        // Slots 1 ms … 999 ms were due, never sent: attempted, skipped, their wait recorded.
        assert_eq!((t.attempted, t.skipped), (1000, 999));
        assert!(t.causes.iter().all(|&c| c == SkipCause::RunEnded));
        assert_eq!(t.never_sent.len(), 999);
        assert_eq!(t.never_sent[0], rules_end + LATE_SEND_GRACE_NS - 1_000_000);
    }

    #[test]
    fn a_run_stopped_early_skips_what_was_due_and_unsent_by_then_and_nothing_later() {
        // A full window under `block` for 5 ms (the server hangs), then the run stops (an
        // error under on_error = "stop"): the slots due by then are skipped, not lost.
        let (s, c) = (per_ms(), client(WhenFull::Block, 1));
        let clock = ManualClock::starting_at(0);
        let mut conn = Conn::new(s, 1);
        let mut t = Counted::default();
        conn.turn(&c, &clock, true, &mut t); // the slot at 0 goes and is never answered
        clock.advance(5_000_000);
        conn.turn(&c, &clock, true, &mut t); // slots 1 … 5 ms wait for room
        assert_eq!((t.attempted, t.skipped), (1, 0), "waiting, not yet counted");
        let rules = Rules {
            client: &c,
            shares: &[1.0],
            measure_start_ns: 0,
            end_ns: 1_000_000_000,
        };
        let now = clock.now_ns();
        conn.launcher.give_up_due(&rules, (now, &clock), &mut t);
        assert!(conn.launcher.done);
        assert_eq!((t.attempted, t.skipped), (6, 5), "the slots at 1 … 5 ms");
        assert!(t.causes.iter().all(|&c| c == SkipCause::RunEnded));
        assert_eq!(t.never_sent.len(), 5);
        assert_eq!(
            t.never_sent[0], 4_000_000,
            "waited from 1 ms to 5 ms: at least"
        );
        assert_eq!(t.attempted, t.sent.len() as u64 + t.skipped);
    }

    #[test]
    fn a_stop_counts_nothing_under_skip_in_the_warm_up_or_after_the_span() {
        let rules = |c, measure_start_ns| Rules {
            client: c,
            shares: &[1.0],
            measure_start_ns,
            end_ns: 1_000_000_000,
        };
        // `skip` keeps no backlog.
        let (s, c) = (per_ms(), client(WhenFull::Skip, 1));
        let clock = ManualClock::starting_at(0);
        let mut conn = Conn::new(s, 1);
        let mut t = Counted::default();
        conn.turn(&c, &clock, true, &mut t);
        let before = (t.attempted, t.skipped);
        clock.advance(3_000_000);
        let now = clock.now_ns();
        conn.launcher
            .give_up_due(&rules(&c, 0), (now, &clock), &mut t);
        assert_eq!((t.attempted, t.skipped), before);
        // Stopped in the warm-up: its slots are consumed, none counted.
        let (s, c) = (per_ms(), client(WhenFull::Block, 1));
        let mut conn = Conn::new(s, 1);
        let mut t = Counted::default();
        let now = clock.now_ns();
        conn.launcher
            .give_up_due(&rules(&c, 10_000_000), (now, &clock), &mut t);
        assert_eq!((t.attempted, t.skipped), (0, 0));
        assert!(conn.launcher.done);
        // A schedule that ran its course counts nothing more.
        let mut t = Counted::default();
        conn.launcher
            .give_up_due(&rules(&c, 0), (now, &clock), &mut t);
        assert_eq!((t.attempted, t.skipped), (0, 0));
    }

    #[test]
    fn block_skips_while_the_connection_is_down() {
        assert_eq!(block(false, false), Decision::Skip);
        assert_eq!(block(true, true), Decision::Wait);
        assert_eq!(block(false, true), Decision::Send);
        // Counted as skipped for want of a connection, not of room in the window.
        let (s, c) = (per_ms(), client(WhenFull::Block, 4));
        let clock = ManualClock::starting_at(0);
        let mut conn = Conn::new(s, 4);
        let mut t = Counted::default();
        clock.advance(2_500_000);
        conn.turn(&c, &clock, false, &mut t);
        assert_eq!((t.attempted, t.skipped, conn.sent.len()), (3, 3, 0));
        assert_eq!(t.causes, [SkipCause::NoConnection; 3]);
    }

    #[test]
    fn every_slot_that_waited_for_the_window_counts_when_several_go_at_once() {
        let (s, c) = (per_ms(), client(WhenFull::Block, 4));
        let clock = ManualClock::starting_at(0);
        let mut conn = Conn::new(s, 4);
        let mut t = Counted::default();
        clock.advance(3_000_000);
        conn.turn(&c, &clock, true, &mut t); // slots 0-3 go: the window is full
        clock.advance(4_000_000); // slots 4-7 fall due behind it
        conn.turn(&c, &clock, true, &mut t);
        assert_eq!((conn.sent.len(), t.held), (4, 0));
        for l in conn.sent.clone() {
            conn.in_flight.complete(l.id).unwrap();
        }
        conn.turn(&c, &clock, true, &mut t);
        assert_eq!(
            (conn.sent.len(), t.held),
            (8, 4),
            "the four that waited, in one turn"
        );
    }

    #[test]
    fn a_slot_due_while_the_window_stayed_full_between_turns_counts_as_held() {
        // A byte-stream driver does not wake for a slot due while its window is full: it waits
        // for the answer, and the turn after it sends the slot — which never met `Wait`.
        let (s, c) = (per_ms(), client(WhenFull::Block, 1));
        let clock = ManualClock::starting_at(0);
        let mut conn = Conn::new(s, 1);
        let mut t = Counted::default();
        conn.turn(&c, &clock, true, &mut t); // slot 0 goes: the window is full
        clock.advance(1_500_000); // slot 1 falls due with no turn
        conn.in_flight.complete(conn.sent[0].id).unwrap();
        conn.turn(&c, &clock, true, &mut t);
        assert_eq!(
            (conn.sent.len(), t.held),
            (2, 1),
            "slot 1 waited for the window"
        );
        conn.in_flight.complete(conn.sent[1].id).unwrap();
        conn.turn(&c, &clock, true, &mut t); // nothing due; the window is empty
        clock.advance(1_000_000);
        conn.turn(&c, &clock, true, &mut t);
        assert_eq!((conn.sent.len(), t.held), (3, 1), "slot 2 found room");
    }

    #[test]
    fn a_slot_held_by_the_window_and_then_skipped_leaves_the_next_send_unheld() {
        let (s, c) = (per_ms(), client(WhenFull::Block, 1));
        let clock = ManualClock::starting_at(0);
        let mut conn = Conn::new(s, 1);
        let mut t = Counted::default();
        conn.turn(&c, &clock, true, &mut t); // slot 0 goes
        clock.advance(1_000_000);
        conn.turn(&c, &clock, true, &mut t); // slot 1 waits for the window
        conn.turn(&c, &clock, false, &mut t); // the connection drops: slot 1 is skipped
        assert_eq!((t.skipped, t.held), (1, 0));
        conn.in_flight.complete(conn.sent[0].id).unwrap();
        conn.turn(&c, &clock, true, &mut t); // the answer's turn: nothing due, the window free
        clock.advance(1_000_000);
        conn.turn(&c, &clock, true, &mut t); // slot 2 finds room
        assert_eq!((conn.sent.len(), t.held), (2, 0), "slot 2 never waited");
    }

    #[test]
    fn skip_counts_every_due_request_the_window_cannot_take() {
        let (s, c) = (per_ms(), client(WhenFull::Skip, 1));
        let clock = ManualClock::starting_at(0);
        let mut conn = Conn::new(s, 1);
        let mut t = Counted::default();
        conn.turn(&c, &clock, true, &mut t);
        clock.advance(3_500_000);
        conn.turn(&c, &clock, true, &mut t);
        assert_eq!((t.attempted, t.skipped, conn.sent.len()), (4, 3, 1));
        assert_eq!(t.causes, [SkipCause::WindowFull; 3]);
        assert_eq!(
            t.attempted,
            t.sent.len() as u64 + t.skipped,
            "attempted = sent + skipped"
        );
    }

    #[test]
    fn adapt_halves_on_a_full_window_and_recovers_in_steps() {
        let mut a = Adapt::new(0);
        assert_eq!(adapt(&mut a, 0, false, true), Decision::Send);
        assert_eq!(adapt(&mut a, 1, true, true), Decision::Skip);
        assert_eq!(a.share(), 0.5);
        // At half the rate every other slot is left out, and those are not attempts.
        let thinned: Vec<Decision> = (2..6).map(|n| adapt(&mut a, n, false, true)).collect();
        assert_eq!(
            thinned,
            [
                Decision::Thin,
                Decision::Send,
                Decision::Thin,
                Decision::Send
            ]
        );
        adapt(&mut a, 1 + ADAPT_STEP_NS, false, true);
        assert!((a.share() - 0.55).abs() < 1e-9, "{}", a.share());
        // A connection being re-established does not slow it down.
        let before = a.share();
        let _ = adapt(&mut a, 2 + ADAPT_STEP_NS, true, false);
        assert_eq!(a.share(), before);
        // A burst of slots finding the window full is one overload: one halving.
        for _ in 0..200 {
            adapt(&mut a, 3 + ADAPT_STEP_NS, true, true);
        }
        assert!((a.share() - 0.275).abs() < 1e-9, "{}", a.share());
        // A window that stays full halves the rate once per ADAPT_HALVE_NS, down to the floor.
        let mut now = 3 + ADAPT_STEP_NS;
        for _ in 0..1_000_000 {
            now += 10_000;
            adapt(&mut a, now, true, true);
        }
        assert_eq!(a.share(), ADAPT_FLOOR, "never below the floor");
    }

    #[test]
    fn adapt_thins_the_schedule_without_counting_attempts() {
        let (s, c) = (per_ms(), client(WhenFull::Adapt, 1));
        let clock = ManualClock::starting_at(0);
        let mut conn = Conn::new(s, 1);
        let mut t = Counted::default();
        conn.turn(&c, &clock, true, &mut t); // slot 0 goes
        clock.advance(1_000_000);
        conn.turn(&c, &clock, true, &mut t); // slot 1: full, skipped, share halves
        conn.in_flight.complete(conn.sent[0].id);
        clock.advance(4_000_000);
        // Slots 2..=5 at half rate: 2 and 4 are left out (not attempts), 3 goes and fills the
        // window, 5 finds it full: skipped, and the rate does not halve again: 4 ms after the
        // last halving it is the same overload.
        conn.turn(&c, &clock, true, &mut t);
        assert_eq!((t.attempted, t.skipped), (4, 2));
        assert_eq!(conn.sent.len(), 2, "{:?}", conn.sent);
        assert_eq!(conn.launcher.adapt.share(), 0.5);
        // 10 ms on, a slot that still finds the window full halves it.
        clock.advance(10_000_000);
        conn.turn(&c, &clock, true, &mut t);
        assert_eq!(conn.launcher.adapt.share(), 0.25);
    }

    #[test]
    fn unpaced_block_keeps_the_window_full_and_skip_sends_batches() {
        let s = Pacing::Immediate;
        let clock = ManualClock::starting_at(0);
        let c = client(WhenFull::Block, 4);
        let mut conn = Conn::new(s, 4);
        let mut t = Counted::default();
        conn.turn(&c, &clock, true, &mut t);
        conn.turn(&c, &clock, true, &mut t);
        assert_eq!((t.attempted, t.skipped, conn.sent.len()), (4, 0, 4));

        let mut c = client(WhenFull::Skip, 4);
        c.turn_batch = 3;
        let mut conn = Conn::new(s, 4);
        let mut t = Counted::default();
        conn.turn(&c, &clock, true, &mut t); // 3 fit
        conn.turn(&c, &clock, true, &mut t); // 1 fits, 2 skipped
        conn.turn(&c, &clock, true, &mut t); // full: nothing attempted
        assert_eq!((t.attempted, t.skipped, conn.sent.len()), (6, 2, 4));
    }

    #[test]
    fn the_budget_ends_sending_and_the_schedule_end_ends_the_launcher() {
        let (s, c) = (per_ms(), client(WhenFull::Skip, 1000));
        let clock = ManualClock::starting_at(0);
        let mut conn = Conn::new(s, 1000);
        let mut t = Counted {
            limit: Some(5),
            ..Default::default()
        };
        clock.advance(10_000_000);
        conn.turn(&c, &clock, true, &mut t);
        assert_eq!((t.attempted, conn.sent.len()), (5, 5));
        assert!(!conn.launcher.done);
        let mut t = Counted::default();
        clock.advance(2_000_000_000);
        conn.turn(&c, &clock, true, &mut t);
        assert!(conn.launcher.done, "the schedule passed its end");
        assert_eq!(
            conn.sent.len(),
            1000,
            "every slot of the second was sent once: `skip` holds no backlog to give up"
        );
    }

    /// The intended send times of every connection `client` opens (all of the run's, or its
    /// shard's), each launched with room for all, over a 1 s schedule with budget `ops`.
    fn intended_times(pacing: Pacing, client: &ClientConfig, ops: Option<u64>) -> Vec<u64> {
        let clock = ManualClock::starting_at(0);
        clock.advance(2_000_000_000);
        let rules = Rules {
            client,
            shares: &[1.0],
            measure_start_ns: 0,
            end_ns: 1_000_000_000,
        };
        let mut times = Vec::new();
        for local in 0..client.local_connections() {
            let index = (client.global_index(local), client.total_connections());
            let budget = connection_budget(ops, client, local);
            let mut launcher = Launcher::new(pacing, 7, 0, index, budget);
            let mut in_flight = InFlight::new(4096);
            let mut t = Counted::default();
            let now = (clock.now_ns(), &clock);
            launcher.send_due(&mut in_flight, true, &rules, now, &mut t, |_| {});
            times.extend(t.sent.iter().map(|s| s.0));
        }
        times.sort_unstable();
        times
    }

    #[test]
    fn a_connection_whose_share_is_spent_is_done_and_wakes_no_more() {
        let c = client(WhenFull::Skip, 1000);
        let clock = ManualClock::starting_at(0);
        let mut conn = Conn::new(per_ms(), 1000);
        conn.launcher = Launcher::new(per_ms(), 1, 0, (0, 1), Some(5));
        let mut t = Counted::default();
        clock.advance(10_000_000);
        conn.turn(&c, &clock, true, &mut t);
        assert_eq!((t.attempted, conn.sent.len()), (5, 5));
        assert!(conn.launcher.done, "its 5 are spent");
        let rules = Rules {
            client: &c,
            shares: &[1.0],
            measure_start_ns: 0,
            end_ns: 1_000_000_000,
        };
        assert_eq!(conn.launcher.next_wake(&conn.in_flight, &rules, 0), None);
    }

    /// A second of stages from 1000/s: hold ¼ s, step to 4000/s ¼ s, spike to 8000/s ¼ s,
    /// ramp from 4000/s (the rate before the spike) to 0 over ¼ s.
    fn stages_pacing(arrivals: Arrivals) -> Pacing {
        use msgbench_model::pacing::{PacingMode, PacingSpec};
        use msgbench_model::stages::{Shape, StageSpec};
        let quarter = std::time::Duration::from_millis(250);
        let stage = |shape, to| StageSpec {
            shape,
            to,
            over: quarter,
        };
        let spec = PacingSpec {
            mode: PacingMode::Stages,
            arrivals,
            start: Some(1000.0),
            stages: vec![
                stage(Shape::Hold, None),
                stage(Shape::Step, Some(4000.0)),
                stage(Shape::Spike, Some(8000.0)),
                stage(Shape::Ramp, Some(0.0)),
            ],
            ..PacingSpec::default()
        };
        let invalid = |f: &str, p: String, x: &str| msgbench_model::ScenarioError::Invalid {
            source_name: "test".into(),
            field: f.into(),
            problem: p,
            fix: x.into(),
        };
        let run = (std::time::Duration::ZERO, std::time::Duration::from_secs(1));
        spec.validate_for(Some(run), &invalid).unwrap()
    }

    #[test]
    fn stages_send_each_stage_s_count_on_either_side_of_its_boundaries() {
        let mut whole = client(WhenFull::Skip, 4096);
        (whole.threads, whole.connections) = (2, 5);
        let times = intended_times(stages_pacing(Arrivals::Uniform), &whole, None);
        let in_quarter = |q: u64| {
            let span = q * 250_000_000..(q + 1) * 250_000_000;
            times.iter().filter(|t| span.contains(t)).count()
        };
        // 1000/s, 4000/s, 8000/s for ¼ s each, then 4000/s falling to 0: 250, 1000, 2000, 500.
        assert_eq!(
            [0, 1, 2, 3].map(in_quarter),
            [250, 1000, 2000, 500],
            "{}",
            times.len()
        );
        // Evenly spaced within a stage, the whole schedule's own spacing across connections.
        assert_eq!(&times[..3], &[0, 1_000_000, 2_000_000]);
        assert_eq!(
            times[250], 250_000_000,
            "the step's first message is at its start"
        );
        let poisson = intended_times(stages_pacing(Arrivals::Poisson), &whole, None);
        let share = |lo: u64, hi: u64| poisson.iter().filter(|t| (lo..hi).contains(t)).count();
        let (hold, spike) = (share(0, 250_000_000), share(500_000_000, 750_000_000));
        assert!(
            (180..320).contains(&hold) && (1800..2200).contains(&spike),
            "{hold} {spike}"
        );
    }

    #[test]
    fn the_shards_schedules_together_are_the_unsharded_schedule() {
        let rate = |arrivals| Pacing::Rate {
            per_sec: 3000.0,
            arrivals,
        };
        let interval = Pacing::Interval {
            every_ns: 10_000_000,
            batch: 3,
        };
        let mut whole = client(WhenFull::Skip, 4096);
        (whole.threads, whole.connections) = (2, 5);
        let stages = [Arrivals::Uniform, Arrivals::Poisson].map(stages_pacing);
        for pacing in [
            rate(Arrivals::Uniform),
            rate(Arrivals::Poisson),
            interval,
            stages[0],
            stages[1],
        ] {
            for ops in [None, Some(1001)] {
                let unsharded = intended_times(pacing, &whole, ops);
                assert!(unsharded.len() > 1000, "{pacing:?}: {}", unsharded.len());
                if ops.is_some() {
                    assert_eq!(unsharded.len(), 1001, "{pacing:?}: the budget is exact");
                }
                for count in [2, 3, 4, 10] {
                    let mut union = Vec::new();
                    for index in 0..count {
                        let mut shard = whole.clone();
                        shard.shard = msgbench_model::shard::Shard { index, count };
                        union.extend(intended_times(pacing, &shard, ops));
                    }
                    union.sort_unstable();
                    assert_eq!(
                        union, unsharded,
                        "{pacing:?} ops {ops:?} over {count} shards"
                    );
                }
            }
        }
    }

    #[test]
    fn classes_follow_their_shares() {
        let mut rng = SmallRng::seed_from_u64(3);
        let shares = [0.25, 0.75];
        let n = 40_000;
        let first = (0..n)
            .filter(|_| pick_class(&shares, &mut rng) == 0)
            .count();
        assert!((first as f64 / n as f64 - 0.25).abs() < 0.01, "{first}");
    }
}
