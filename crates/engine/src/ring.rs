//! A bounded single-producer/single-consumer ring of any capacity.
//!
//! Written by hand because it *is* the system under test of the `queue` lab and must be at least
//! as fast as the best crate (rtrb, selectable as [`msgbench_model::queue::RingKind::Rtrb`]):
//! head and tail live on their own cache lines; each side keeps a cached copy of the other side's
//! position and reads the shared one only when the ring looks full (producer) or empty
//! (consumer); positions run over `0 .. 2 × capacity` (as in rtrb), so any capacity works
//! without a division and without a separate slot index. NB: an earlier version carried a slot
//! index beside free-running positions; it did one more store per operation and ran at 0.4–0.8×
//! rtrb in `cargo bench --bench ring` (this VM's producer/consumer pairs are bistable, and the
//! extra store tipped ours into the slow regime); this layout measures 0.96–1.08× with an A/A
//! control of 1.00–1.03.
use crossbeam_utils::CachePadded;
use std::cell::UnsafeCell;
use std::mem::MaybeUninit;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

struct Shared<T> {
    /// Position of the next slot to read; written by the consumer only.
    head: CachePadded<AtomicU64>,
    /// Position of the next slot to write; written by the producer only.
    tail: CachePadded<AtomicU64>,
    slots: Box<[UnsafeCell<MaybeUninit<T>>]>,
}

// SAFETY: a slot is written only by the producer while it is outside [head, tail) and read only
// by the consumer while it is inside; the Release store of `tail` (after the write) and the
// Acquire load of it (before the read) order the two, and symmetrically for `head`.
unsafe impl<T: Send> Sync for Shared<T> {}

/// The writing end. Aligned to its own cache lines: each end writes its private positions on
/// every operation, and two ends placed side by side in memory (in one struct, say) must not share
/// a line.
#[repr(align(128))]
pub struct Producer<T> {
    shared: Arc<Shared<T>>,
    /// `shared.slots` base, kept here so a push reads one line less.
    slots: *const UnsafeCell<MaybeUninit<T>>,
    tail: u64,
    cached_head: u64,
    capacity: u64,
}

/// The reading end (cache-line aligned, see [`Producer`]).
#[repr(align(128))]
pub struct Consumer<T> {
    shared: Arc<Shared<T>>,
    slots: *const UnsafeCell<MaybeUninit<T>>,
    head: u64,
    cached_tail: u64,
    capacity: u64,
}

// SAFETY: `slots` points into the allocation `shared` keeps alive; each end is used by one thread
// at a time, and the ring's protocol (see `Shared`) orders every access to a slot.
unsafe impl<T: Send> Send for Producer<T> {}
// SAFETY: as for `Producer`.
unsafe impl<T: Send> Send for Consumer<T> {}

/// A ring of `capacity` slots (> 0). Items are `Copy`, so nothing needs dropping.
pub fn channel<T: Copy + Send>(capacity: usize) -> (Producer<T>, Consumer<T>) {
    assert!(capacity > 0, "ring capacity must be positive");
    let slots = (0..capacity)
        .map(|_| UnsafeCell::new(MaybeUninit::uninit()))
        .collect();
    let shared = Arc::new(Shared {
        head: CachePadded::new(AtomicU64::new(0)),
        tail: CachePadded::new(AtomicU64::new(0)),
        slots,
    });
    let slots = shared.slots.as_ptr();
    (
        Producer {
            shared: shared.clone(),
            slots,
            tail: 0,
            cached_head: 0,
            capacity: capacity as u64,
        },
        Consumer {
            shared,
            slots,
            head: 0,
            cached_tail: 0,
            capacity: capacity as u64,
        },
    )
}

impl<T: Copy + Send> Producer<T> {
    /// Appends `value`, or gives it back when the ring is full.
    #[inline]
    pub fn push(&mut self, value: T) -> Result<(), T> {
        if distance(self.cached_head, self.tail, self.capacity) == self.capacity {
            self.cached_head = self.shared.head.load(Ordering::Acquire);
            if distance(self.cached_head, self.tail, self.capacity) == self.capacity {
                return Err(value);
            }
        }
        // SAFETY: fewer than `capacity` items are in the ring, so the slot at `tail` is outside
        // [head, tail): the consumer does not touch it until the Release store below publishes it.
        unsafe { (*(*self.slots.add(slot_of(self.tail, self.capacity))).get()).write(value) };
        self.tail = next(self.tail, self.capacity);
        self.shared.tail.store(self.tail, Ordering::Release);
        Ok(())
    }

    /// Items in the ring right now (a snapshot).
    pub fn len(&self) -> usize {
        distance(
            self.shared.head.load(Ordering::Acquire),
            self.tail,
            self.capacity,
        ) as usize
    }

    /// True when the ring holds nothing (a snapshot).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl<T: Copy + Send> Consumer<T> {
    /// Takes the oldest item, if any.
    #[inline]
    pub fn pop(&mut self) -> Option<T> {
        if self.head == self.cached_tail {
            self.cached_tail = self.shared.tail.load(Ordering::Acquire);
            if self.head == self.cached_tail {
                return None;
            }
        }
        // SAFETY: head != tail (Acquire-loaded), so the slot at `head` was written and published.
        let value =
            unsafe { (*(*self.slots.add(slot_of(self.head, self.capacity))).get()).assume_init() };
        self.head = next(self.head, self.capacity);
        self.shared.head.store(self.head, Ordering::Release);
        Some(value)
    }

    /// True when an item is ready (refreshes the cached tail).
    #[inline]
    pub fn has_items(&mut self) -> bool {
        self.head != self.cached_tail || {
            self.cached_tail = self.shared.tail.load(Ordering::Acquire);
            self.head != self.cached_tail
        }
    }
}

/// Positions run over `0 .. 2 × capacity`, so `head == tail` means empty and a distance of
/// `capacity` means full, with no division and no separate slot index.
#[inline(always)]
fn next(position: u64, capacity: u64) -> u64 {
    if position + 1 < 2 * capacity {
        position + 1
    } else {
        0
    }
}

/// The slot of a position.
#[inline(always)]
fn slot_of(position: u64, capacity: u64) -> usize {
    (if position < capacity {
        position
    } else {
        position - capacity
    }) as usize
}

/// Items between `head` and `tail`.
#[inline(always)]
fn distance(head: u64, tail: u64, capacity: u64) -> u64 {
    if head <= tail {
        tail - head
    } else {
        2 * capacity - head + tail
    }
}

/// The producer side of any SPSC ring, so the queue lab runs ours and rtrb through one harness.
pub trait RingProducer<T>: Send {
    /// False for a queue msgbench did not write (a library's): the lab then checks that every
    /// item it pops was given to it, once (`ring_library`). True costs nothing.
    const TRUSTED: bool = true;
    /// Appends or gives the value back when full.
    fn push(&mut self, value: T) -> Result<(), T>;
    /// True when a push would fail right now.
    fn is_full(&self) -> bool;
}

/// The consumer side of any SPSC ring.
pub trait RingConsumer<T>: Send {
    /// See [`RingProducer::TRUSTED`].
    const TRUSTED: bool = true;
    /// Takes the oldest item.
    fn pop(&mut self) -> Option<T>;
    /// Items waiting right now.
    fn waiting(&self) -> usize;
}

impl<T: Copy + Send> RingProducer<T> for Producer<T> {
    #[inline]
    fn push(&mut self, value: T) -> Result<(), T> {
        Producer::push(self, value)
    }
    fn is_full(&self) -> bool {
        self.len() as u64 == self.capacity
    }
}

impl<T: Copy + Send> RingConsumer<T> for Consumer<T> {
    #[inline]
    fn pop(&mut self) -> Option<T> {
        Consumer::pop(self)
    }
    fn waiting(&self) -> usize {
        distance(
            self.head,
            self.shared.tail.load(Ordering::Acquire),
            self.capacity,
        ) as usize
    }
}

impl<T: Send> RingProducer<T> for rtrb::Producer<T> {
    #[inline]
    fn push(&mut self, value: T) -> Result<(), T> {
        rtrb::Producer::push(self, value).map_err(|rtrb::PushError::Full(v)| v)
    }
    fn is_full(&self) -> bool {
        self.slots() == 0
    }
}

impl<T: Send> RingConsumer<T> for rtrb::Consumer<T> {
    #[inline]
    fn pop(&mut self) -> Option<T> {
        rtrb::Consumer::pop(self).ok()
    }
    fn waiting(&self) -> usize {
        self.slots()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fills_to_any_capacity_and_wraps() {
        for cap in [1usize, 3, 8, 10] {
            let (mut p, mut c) = channel::<u64>(cap);
            let mut next_out = 0;
            for i in 0..(cap as u64 * 5) {
                if p.push(i).is_err() {
                    assert_eq!(p.len(), cap);
                    while let Some(v) = c.pop() {
                        assert_eq!(v, next_out);
                        next_out += 1;
                    }
                    p.push(i).unwrap();
                }
            }
            while let Some(v) = c.pop() {
                assert_eq!(v, next_out);
                next_out += 1;
            }
            assert_eq!(next_out, cap as u64 * 5);
        }
    }

    #[test]
    fn concurrent_stress_keeps_every_item_in_order() {
        for cap in [1usize, 7, 64] {
            let (mut p, mut c) = channel::<u64>(cap);
            let n = 2_000_000u64;
            let producer = std::thread::spawn(move || {
                for i in 0..n {
                    let mut v = i;
                    while let Err(back) = p.push(v) {
                        v = back;
                        std::hint::spin_loop();
                    }
                }
            });
            let mut expected = 0;
            while expected < n {
                if let Some(v) = c.pop() {
                    assert_eq!(v, expected, "capacity {cap}");
                    expected += 1;
                }
            }
            producer.join().unwrap();
            assert!(c.pop().is_none());
        }
    }
}
