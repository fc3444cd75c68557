//! What the publishers of a run share with each other and with its subscribers: each
//! publisher's own figures ([`PublisherStats`], read by the accounting at the end) and, while
//! the run lasts, [`Progress`]: each publisher's final count and when publishing stopped, so a
//! subscriber knows when it has seen everything.
use crate::harness::Timeline;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// What one publisher measured.
#[derive(Debug, Clone, Default)]
pub struct PublisherStats {
    /// Messages it published, warm-up included (its next sequence number).
    pub sent_all: u64,
    /// Sequence number of its first message of the measured window.
    pub first_measured: Option<u64>,
    /// Messages of the measured window it published.
    pub measured: u64,
    /// Of those, per second of the window (by intended publish time).
    pub per_second: Vec<u64>,
    /// Acknowledgements the broker sent (Redis: one reply per PUBLISH).
    pub acks: u64,
    /// Its connection failed.
    pub broken: bool,
}

impl PublisherStats {
    /// Counts message `seq` of the measured window, due at `intended_ns`.
    #[inline]
    pub fn count_measured(&mut self, seq: u64, intended_ns: u64, timeline: &Timeline) {
        self.first_measured.get_or_insert(seq);
        self.measured += 1;
        let second = ((intended_ns - timeline.measure_start_ns) / 1_000_000_000) as usize;
        if second >= self.per_second.len() {
            self.per_second.resize(second + 1, 0);
        }
        self.per_second[second] += 1;
    }
}

/// What the subscriber threads learn of the publishers: each one's final count, and when
/// publishing stopped.
#[derive(Debug)]
pub struct Progress {
    /// Per publisher, messages it published once it finished (`u64::MAX` until then).
    counts: Vec<AtomicU64>,
    /// Publishers of this process (a shard's; the others never report here).
    local: usize,
    finished: AtomicUsize,
    send_end_ns: AtomicU64,
}

impl Progress {
    /// Nothing known yet of `publishers` publishers, all of this process.
    pub fn new(publishers: usize) -> Progress {
        Progress::of_shard(publishers, publishers)
    }

    /// Nothing known yet of the run's `publishers`, `local` of them this process's: a shard
    /// learns its own publishers' counts only, so its subscriptions wait for the drain's end.
    pub fn of_shard(publishers: usize, local: usize) -> Progress {
        Progress {
            counts: (0..publishers).map(|_| AtomicU64::new(u64::MAX)).collect(),
            local,
            finished: AtomicUsize::new(0),
            send_end_ns: AtomicU64::new(0),
        }
    }

    /// A publisher thread stopped sending at `send_end_ns`.
    pub fn stopped_sending(&self, send_end_ns: u64) {
        self.send_end_ns.fetch_max(send_end_ns, Ordering::Relaxed);
    }

    /// Publisher `index` finished, having published `sent` messages.
    pub fn finished(&self, index: u32, sent: u64) {
        self.counts[index as usize].store(sent, Ordering::Release);
        self.finished.fetch_add(1, Ordering::AcqRel);
    }

    /// Publisher `index`'s final count, once it finished.
    pub fn final_count(&self, index: u32) -> Option<u64> {
        match self.counts[index as usize].load(Ordering::Acquire) {
            u64::MAX => None,
            n => Some(n),
        }
    }

    /// When publishing stopped, once every publisher of this process finished.
    pub fn all_finished(&self) -> Option<u64> {
        (self.finished.load(Ordering::Acquire) == self.local)
            .then(|| self.send_end_ns.load(Ordering::Relaxed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn progress_tells_subscribers_when_every_publisher_is_done() {
        let p = Progress::new(2);
        p.stopped_sending(7);
        p.finished(1, 30);
        assert_eq!((p.final_count(0), p.final_count(1)), (None, Some(30)));
        assert_eq!(p.all_finished(), None);
        p.stopped_sending(9);
        p.finished(0, 10);
        assert_eq!(p.all_finished(), Some(9));
    }
}
