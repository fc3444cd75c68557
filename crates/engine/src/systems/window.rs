//! What every request/response driver does per connection, whatever carries the bytes (`rpc`
//! and `redis` over mio, `ws-rpc` through a WebSocket socket thread): the pacer says when each
//! request is due, the [`Window`] holds the requests in flight, and [`Launcher::send_due`]
//! applies `client.when_full` — `block` (the wait is latency), `skip` (counted), `adapt`
//! (AIMD on the connection's rate) — and the measured window's accounting.
use crate::clock::Clock;
use crate::pacer::Pacer;
use crate::recorder::Recorder;
use msgbench_model::client::{ClientConfig, WindowFull};
use msgbench_model::result::Faults;
use msgbench_model::scenario::{Pacing, Scenario};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use std::collections::VecDeque;

/// `adapt`: rate added back per step without a full window, as a share of the target.
const ADAPT_STEP: f64 = 0.05;
/// `adapt`: length of that step.
const ADAPT_STEP_NS: u64 = 100_000_000;
/// `adapt`: lowest share of the target a connection slows down to.
const ADAPT_FLOOR: f64 = 1.0 / 1024.0;

/// Generations wrap at 2^21, so that `id < 2^53`.
const GENERATION_MASK: u32 = (1 << 21) - 1;

/// One request in flight.
#[derive(Debug, Clone, Copy, Default)]
pub struct Flight {
    /// Its id: generation in the high 32 bits, window slot in the low 32.
    pub id: u64,
    /// When the schedule meant it to go (latency counts from here).
    pub intended_ns: u64,
    /// When it went (service time counts from here).
    pub sent_ns: u64,
    /// Operation class.
    pub class: u16,
    /// It belongs to the measured window.
    pub measured: bool,
    /// The slot holds a request in flight.
    pub active: bool,
}

/// The requests in flight on one connection: at most `window`, found by id in O(1) (the id's
/// low 32 bits are the slot) or, for protocols without ids, in send order. Allocated once.
#[derive(Debug)]
pub struct Window {
    flights: Vec<Flight>,
    free: Vec<u32>,
    /// `(slot, id)` in send order: the oldest request (timeouts) and the next response of an
    /// ordered protocol. Entries whose slot was completed are skipped lazily.
    order: VecDeque<(u32, u64)>,
    in_flight: usize,
    generation: u32,
}

impl Window {
    /// An empty window of `size` slots.
    pub fn new(size: usize) -> Window {
        Window {
            flights: vec![Flight::default(); size],
            free: (0..size as u32).rev().collect(),
            order: VecDeque::with_capacity(size * 2),
            in_flight: 0,
            generation: 0,
        }
    }

    /// No slot is free.
    #[inline]
    pub fn is_full(&self) -> bool {
        self.free.is_empty()
    }

    /// Free slots.
    #[inline]
    pub fn room(&self) -> usize {
        self.free.len()
    }

    /// Requests in flight.
    #[inline]
    pub fn in_flight(&self) -> usize {
        self.in_flight
    }

    /// Measured requests in flight.
    pub fn measured_in_flight(&self) -> u64 {
        self.flights
            .iter()
            .filter(|f| f.active && f.measured)
            .count() as u64
    }

    /// Takes a slot for a new request; returns its id.
    #[inline]
    pub fn open(&mut self, class: u16, intended_ns: u64, sent_ns: u64, measured: bool) -> u64 {
        let slot = self.free.pop().expect("window has room");
        // 21 bits of generation: ids stay below 2^53, exact in a JavaScript number (servers
        // written in JavaScript echo JSON-RPC ids through one).
        self.generation = (self.generation + 1) & GENERATION_MASK;
        let id = (u64::from(self.generation) << 32) | u64::from(slot);
        self.flights[slot as usize] = Flight {
            id,
            intended_ns,
            sent_ns,
            class,
            measured,
            active: true,
        };
        self.order.push_back((slot, id));
        self.in_flight += 1;
        // Out-of-order completions leave stale entries behind a slow request: drop them before
        // the queue outgrows its pre-allocated capacity.
        if self.order.len() >= 2 * self.flights.len() {
            let flights = &self.flights;
            self.order
                .retain(|&(s, id)| flights[s as usize].active && flights[s as usize].id == id);
        }
        id
    }

    /// Completes the request with `id`; `None` when no such request is in flight.
    #[inline]
    pub fn complete(&mut self, id: u64) -> Option<Flight> {
        let slot = (id & 0xFFFF_FFFF) as usize;
        match self.flights.get(slot) {
            Some(f) if f.active && f.id == id => Some(self.release(slot)),
            _ => None,
        }
    }

    /// Completes the oldest request (protocols that answer in order); `None` when none is in
    /// flight.
    #[inline]
    pub fn complete_oldest(&mut self) -> Option<Flight> {
        while let Some((slot, id)) = self.order.pop_front() {
            let f = &self.flights[slot as usize];
            if f.active && f.id == id {
                return Some(self.release(slot as usize));
            }
        }
        None
    }

    fn release(&mut self, slot: usize) -> Flight {
        let f = &mut self.flights[slot];
        f.active = false;
        self.free.push(slot as u32);
        self.in_flight -= 1;
        *f
    }

    /// When the oldest request in flight times out.
    pub fn oldest_deadline(&mut self, timeout_ns: u64) -> Option<u64> {
        while let Some(&(slot, id)) = self.order.front() {
            let f = &self.flights[slot as usize];
            if f.active && f.id == id {
                return Some(f.sent_ns.saturating_add(timeout_ns));
            }
            self.order.pop_front();
        }
        None
    }

    /// Ends every request in flight (the connection failed); `failed` sees each one.
    pub fn fail_all(&mut self, mut failed: impl FnMut(&Flight)) {
        for f in self.flights.iter_mut().filter(|f| f.active) {
            f.active = false;
            failed(f);
        }
        self.free = (0..self.flights.len() as u32).rev().collect();
        self.order.clear();
        self.in_flight = 0;
    }
}

/// `adapt` state of one connection.
#[derive(Debug, Clone, Copy)]
struct Adapt {
    share: f64,
    credit: f64,
    last_step_ns: u64,
}

/// What every connection's launcher shares.
pub struct Rules<'a> {
    /// Client settings (window, when full, …).
    pub client: &'a ClientConfig,
    /// Share of each operation class in the mix.
    pub shares: &'a [f64],
    /// Start of the measured window.
    pub measure_start_ns: u64,
    /// End of the schedule.
    pub end_ns: u64,
}

/// The measured-window budget of one driver thread (`run.operations`).
#[derive(Debug)]
pub struct Budget {
    /// Most measured attempts.
    pub limit: u64,
    /// Measured attempts so far.
    pub used: u64,
}

impl Budget {
    /// Thread `t`'s share of `ops` over `threads` threads (no limit without `ops`).
    pub fn share(ops: Option<u64>, threads: usize, t: usize) -> Budget {
        let limit = match ops {
            None => u64::MAX,
            Some(n) => n / threads as u64 + u64::from((t as u64) < n % threads as u64),
        };
        Budget { limit, used: 0 }
    }

    /// The budget is spent.
    #[inline]
    pub fn spent(&self) -> bool {
        self.used >= self.limit
    }
}

/// One request to send now.
#[derive(Debug, Clone, Copy)]
pub struct Launch {
    /// Operation class.
    pub class: usize,
    /// Its id in the window.
    pub id: u64,
    /// When it goes.
    pub sent_ns: u64,
}

/// Decides when the requests of one connection go: its pacer, its `adapt` state, its mix.
pub struct Launcher {
    /// The connection's schedule.
    pub pacer: Pacer,
    rng: SmallRng,
    adapt: Adapt,
    /// No more sends: the schedule passed the window's end.
    pub done: bool,
}

impl Launcher {
    /// The launcher of connection `index` of `total`: rate pacing gives each connection an
    /// equal share of the rate, offset so that their union stays even.
    pub fn new(scenario: &Scenario, t0_ns: u64, index: usize, total: usize) -> Launcher {
        let (pacing, offset) = match scenario.pacing {
            Pacing::Rate { per_sec, arrivals } => (
                Pacing::Rate {
                    per_sec: per_sec / total as f64,
                    arrivals,
                },
                (1e9 / per_sec * index as f64) as u64,
            ),
            p => (p, 0),
        };
        let seed = scenario.run.seed ^ (index as u64).wrapping_mul(0xA24B_AED4_963E_E407);
        Launcher {
            pacer: Pacer::new(pacing, t0_ns + offset, seed),
            rng: SmallRng::seed_from_u64(seed.wrapping_add(1)),
            adapt: Adapt {
                share: 1.0,
                credit: 0.0,
                last_step_ns: t0_ns,
            },
            done: false,
        }
    }

    /// When this connection next needs the loop's attention for sending (`None`: not before
    /// something else happens, e.g. a response frees the window).
    pub fn next_wake(&mut self, window: &Window, rules: &Rules, now: u64) -> Option<u64> {
        if self.done {
            return None;
        }
        match self.pacer.upcoming_ns() {
            // Unpaced: send when the window has room; with a full window wait for a response.
            None => (!window.is_full()).then_some(now).or(Some(rules.end_ns)),
            Some(due) => {
                (rules.client.when_full != WindowFull::Block || !window.is_full()).then_some(due)
            }
        }
    }

    /// Sends what is due at `now`: each request is opened in `window` and handed to `send`.
    /// `connected == false` skips what is due (a connection being re-established).
    #[allow(clippy::too_many_arguments)]
    pub fn send_due<C: Clock>(
        &mut self,
        window: &mut Window,
        connected: bool,
        now: u64,
        rules: &Rules,
        clock: &C,
        budget: &mut Budget,
        rec: &mut Recorder,
        mut send: impl FnMut(Launch),
    ) {
        let client = rules.client;
        if self.done {
            return;
        }
        let mut go = |window: &mut Window,
                      rng: &mut SmallRng,
                      rec: &mut Recorder,
                      intended: u64,
                      scheduled: u64,
                      actual: u64,
                      measured: bool| {
            let class = pick_class(rules.shares, rng);
            let id = window.open(class as u16, intended, actual, measured);
            if measured {
                rec.sent(scheduled, actual);
            }
            send(Launch {
                class,
                id,
                sent_ns: actual,
            });
        };
        match self.pacer.upcoming_ns() {
            None => {
                if now >= rules.end_ns {
                    self.done = true;
                    return;
                }
                // Unpaced and disconnected: nothing is due, so nothing is attempted.
                if !connected {
                    return;
                }
                let measured = now >= rules.measure_start_ns;
                // `skip` attempts a batch per turn of the loop (what does not fit is skipped);
                // otherwise the window is kept full (closed loop).
                let attempts = match client.when_full {
                    WindowFull::Skip if !window.is_full() => client.turn_batch,
                    WindowFull::Skip => 0,
                    _ => window.room(),
                };
                for _ in 0..attempts {
                    if budget.spent() {
                        break;
                    }
                    if measured {
                        budget.used += 1;
                        rec.attempted();
                    }
                    if window.is_full() {
                        if measured {
                            rec.skipped();
                        }
                        continue;
                    }
                    go(window, &mut self.rng, rec, now, now, now, measured);
                }
            }
            Some(_) => loop {
                let due = self.pacer.upcoming_ns().expect("paced");
                if due >= rules.end_ns {
                    self.done = true;
                    break;
                }
                if due > now {
                    break;
                }
                let measured = due >= rules.measure_start_ns;
                if measured && budget.spent() {
                    break;
                }
                if client.when_full == WindowFull::Adapt {
                    if now.saturating_sub(self.adapt.last_step_ns) >= ADAPT_STEP_NS {
                        self.adapt.share = (self.adapt.share + ADAPT_STEP).min(1.0);
                        self.adapt.last_step_ns = now;
                    }
                    // Thin the schedule to `share` of its slots; untaken slots are not attempts.
                    self.adapt.credit += self.adapt.share;
                    if self.adapt.credit < 1.0 {
                        self.pacer.next(clock);
                        continue;
                    }
                    self.adapt.credit -= 1.0;
                }
                let blocked = window.is_full() || !connected;
                if blocked && client.when_full == WindowFull::Block && connected {
                    break;
                }
                let slot = self.pacer.next(clock);
                if measured {
                    budget.used += 1;
                    rec.attempted();
                }
                if blocked {
                    if measured {
                        rec.skipped();
                    }
                    if client.when_full == WindowFull::Adapt && connected {
                        self.adapt.share = (self.adapt.share / 2.0).max(ADAPT_FLOOR);
                        self.adapt.last_step_ns = now;
                    }
                    continue;
                }
                go(
                    window,
                    &mut self.rng,
                    rec,
                    slot.intended_ns,
                    slot.scheduled_ns,
                    slot.actual_ns,
                    measured,
                );
            },
        }
    }
}

/// Why a connection's requests failed.
#[derive(Debug, Clone, Copy)]
pub enum Failure {
    /// The oldest request got no response within `client.timeout`.
    Timeout,
    /// The connection was closed or reset.
    Closed,
    /// The server sent this (not a valid response).
    Protocol(&'static str),
}

impl Failure {
    /// Counts the failure in `faults`; returns what happened, in words.
    pub fn count(self, faults: &mut Faults, timeout_ns: u64) -> String {
        match self {
            Failure::Timeout => {
                faults.timeouts += 1;
                format!(
                    "a request got no response within {}",
                    msgbench_model::duration::format(std::time::Duration::from_nanos(timeout_ns))
                )
            }
            Failure::Closed => {
                faults.disconnects += 1;
                "the connection was closed or reset".to_string()
            }
            Failure::Protocol(what) => {
                faults.protocol_errors += 1;
                format!("the server sent {what}")
            }
        }
    }
}

/// Why a run stopped under `client.on_error = "stop"`: what happened, on which connection,
/// and when.
pub fn stop_message(
    what: &str,
    connection: usize,
    address: &str,
    now_ns: u64,
    measure_start_ns: u64,
) -> String {
    let when = if now_ns < measure_start_ns {
        "during the warm-up".to_string()
    } else {
        format!(
            "{:.2} s into the measured window",
            (now_ns - measure_start_ns) as f64 / 1e9
        )
    };
    format!(
        "{what} on connection {connection} to {address} {when}; the run stopped (set `client.on_error = \"reconnect\"` to go on)"
    )
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

    #[test]
    fn ids_find_their_slot_and_stale_ids_are_refused() {
        let mut w = Window::new(2);
        let a = w.open(0, 1, 2, true);
        let b = w.open(1, 3, 4, false);
        assert!(w.is_full());
        assert_eq!(w.complete(b).map(|f| f.class), Some(1));
        assert!(w.complete(b).is_none(), "completed twice");
        let c = w.open(0, 5, 6, true);
        assert_ne!(b, c, "a reused slot gets a new id");
        assert!(w.complete(b).is_none());
        assert_eq!(w.complete_oldest().map(|f| f.id), Some(a));
        assert_eq!(w.oldest_deadline(10), Some(16));
        let mut failed = 0;
        w.fail_all(|f| failed += u32::from(f.measured));
        assert_eq!((failed, w.in_flight(), w.room()), (1, 0, 2));
    }
}
