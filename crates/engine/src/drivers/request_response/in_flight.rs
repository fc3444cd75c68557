//! The requests in flight on one connection (at most `client.window`, the pipeline depth):
//! found by id in O(1) or, for protocols that answer in order, in send order; their timeouts;
//! failing them all when the connection fails. Allocated once, before the run.
use crate::recorder::Recorder;
use msgbench_model::result::Faults;
use std::collections::VecDeque;

/// Generations wrap at 2^21, so that `id < 2^53`.
const GENERATION_MASK: u32 = (1 << 21) - 1;

/// One request in flight.
#[derive(Debug, Clone, Copy, Default)]
pub struct Flight {
    /// Its id: generation in the high 32 bits, slot in the low 32.
    pub id: u64,
    /// When the schedule meant it to go (latency counts from here).
    pub intended_ns: u64,
    /// When it went (service time counts from here).
    pub sent_ns: u64,
    /// Operation class.
    pub class: u16,
    /// It belongs to the measured span.
    pub measured: bool,
    /// The slot holds a request in flight.
    pub active: bool,
}

/// The requests in flight on one connection: at most `client.window` of them, found by id in
/// O(1) (the id's low 32 bits are the slot) or, for protocols without ids, in send order.
#[derive(Debug)]
pub struct InFlight {
    flights: Vec<Flight>,
    free: Vec<u32>,
    /// `(slot, id)` in send order: the oldest request (timeouts) and the next response of an
    /// ordered protocol. Entries whose slot was completed are skipped lazily.
    order: VecDeque<(u32, u64)>,
    in_flight: usize,
    generation: u32,
}

impl InFlight {
    /// An empty table of `size` slots.
    pub fn new(size: usize) -> InFlight {
        InFlight {
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

    /// The measured requests in flight.
    pub fn measured_flights(&self) -> impl Iterator<Item = &Flight> {
        self.flights.iter().filter(|f| f.active && f.measured)
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

    /// The oldest request in flight.
    pub fn oldest(&mut self) -> Option<Flight> {
        while let Some(&(slot, id)) = self.order.front() {
            let f = &self.flights[slot as usize];
            if f.active && f.id == id {
                return Some(*f);
            }
            self.order.pop_front();
        }
        None
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

    /// The oldest request in flight got no response within `timeout_ns` by `now`.
    pub fn timed_out(&mut self, timeout_ns: u64, now: u64) -> bool {
        self.oldest_deadline(timeout_ns).is_some_and(|d| now > d)
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

/// Counts the response to `flight` on the worker's connection `conn` at `now`: delivered with
/// its latency, or, for an error reply, failed (and a server error in `faults`). Warm-up
/// requests count only as faults.
#[inline]
pub fn record_response(
    rec: &mut Recorder,
    faults: &mut Faults,
    conn: usize,
    flight: &Flight,
    ok: bool,
    now: u64,
) {
    if !ok {
        faults.server_errors += 1;
    }
    if flight.measured {
        if ok {
            rec.delivered_on(
                conn,
                flight.class as usize,
                flight.intended_ns,
                flight.sent_ns,
                now,
            );
        } else {
            rec.failed_on(conn);
        }
    }
}

/// Fails every request in flight on the worker's connection `conn` at `now` (it failed or its
/// oldest request timed out), counting the measured ones and how long each had waited.
pub fn fail_all_counted(in_flight: &mut InFlight, rec: &mut Recorder, conn: usize, now: u64) {
    in_flight.fail_all(|f| {
        if f.measured {
            rec.failed_on(conn);
            rec.unanswered(f.intended_ns, now);
        }
    });
}

/// Ends a driver thread's recording at `now`: the measured requests still in flight on its
/// connections are its `in_flight_end`.
pub fn close_recording<'a>(
    mut rec: Recorder,
    in_flight: impl Iterator<Item = &'a InFlight>,
    now: u64,
) {
    let mut left = 0;
    for f in in_flight.flat_map(InFlight::measured_flights) {
        rec.unanswered(f.intended_ns, now);
        left += 1;
    }
    rec.in_flight_at_end(left);
    rec.finish(now);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_find_their_slot_and_stale_ids_are_refused() {
        let mut w = InFlight::new(2);
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
