//! The user's own queue in the queue lab (`queue.ring = "library"`): a shared library loaded at
//! run time (with `libloading`) that exports msgbench's queue ABI, five C functions declared in
//! `examples/queues/msgbench_queue.h` (docs/own-queue.md):
//!
//! ```c
//! uint32_t msgbench_queue_abi(void);                       /* MSGBENCH_QUEUE_ABI (1)   */
//! void    *msgbench_queue_create(size_t capacity, size_t item_bytes);  /* NULL: failed */
//! int      msgbench_queue_try_push(void *q, const void *item); /* 1 pushed, 0 full     */
//! int      msgbench_queue_try_pop(void *q, void *item);        /* 1 popped, 0 empty    */
//! size_t   msgbench_queue_len(void *q);                     /* items waiting (may lag) */
//! void     msgbench_queue_destroy(void *q);
//! ```
//!
//! One producer thread pushes and one consumer thread pops (single-producer single-consumer),
//! each through a function pointer: what this costs beside a ring compiled into msgbench is
//! measured by `bench/queue-library.sh`. The lab does not trust what such a queue returns
//! ([`RingConsumer::TRUSTED`] is false): an item it was never given, or gives twice, is caught by
//! the consumer's sequence check and counted, never delivered. What a foreign library can do to
//! the process (crash it, write over its memory) no check can prevent: docs/own-queue.md says so.
use crate::ring::{RingConsumer, RingProducer};
use std::ffi::c_void;
use std::marker::PhantomData;
use std::path::Path;
use std::sync::Arc;

/// The ABI version this msgbench speaks (`MSGBENCH_QUEUE_ABI` in the header).
pub const ABI_VERSION: u32 = 1;

/// A type any bit pattern of which is a valid value, so that bytes a foreign queue writes can
/// be read as one (the lab's items: integers only).
///
/// # Safety
/// Implement only for `Copy` types made of integers, with no padding that matters and no
/// pointers, references, `bool`s or enums.
pub unsafe trait AnyBits: Copy + Send + 'static {}

type AbiFn = unsafe extern "C" fn() -> u32;
type CreateFn = unsafe extern "C" fn(usize, usize) -> *mut c_void;
type PushFn = unsafe extern "C" fn(*mut c_void, *const c_void) -> i32;
type PopFn = unsafe extern "C" fn(*mut c_void, *mut c_void) -> i32;
type LenFn = unsafe extern "C" fn(*mut c_void) -> usize;
type DestroyFn = unsafe extern "C" fn(*mut c_void);

/// One queue made by the library, destroyed (and the library unloaded after it) when both ends
/// are dropped.
struct Queue {
    raw: *mut c_void,
    try_push: PushFn,
    try_pop: PopFn,
    len: LenFn,
    destroy: DestroyFn,
    /// Kept loaded while the function pointers above are in use; dropped last.
    _library: libloading::Library,
}

// SAFETY: the ABI's contract is that one thread may push while another pops; the lab keeps to
// it (one producer end, one consumer end), and `destroy` runs once, after both ends are gone.
unsafe impl Send for Queue {}
unsafe impl Sync for Queue {}

impl Drop for Queue {
    fn drop(&mut self) {
        // SAFETY: `raw` came from this library's `create` and is destroyed once.
        unsafe { (self.destroy)(self.raw) }
    }
}

/// The producer end of a library queue.
pub struct LibraryProducer<T> {
    queue: Arc<Queue>,
    capacity: usize,
    _items: PhantomData<T>,
}

/// The consumer end of a library queue.
pub struct LibraryConsumer<T> {
    queue: Arc<Queue>,
    _items: PhantomData<T>,
}

/// The function `name` of `library`, typed as the header declares it.
fn get<F: Copy>(library: &libloading::Library, name: &str) -> Result<F, String> {
    // SAFETY: `F` is the header's type for `name`; a library that exports the name with
    // another type breaks the ABI it claims by exporting it.
    unsafe { library.get::<F>(name.as_bytes()) }
        .map(|symbol| *symbol)
        .map_err(|e| format!("it must export {name} (examples/queues/msgbench_queue.h): {e}"))
}

/// Loads `path`, checks its ABI version and makes a queue of `capacity` items of `T`.
pub fn channel<T: AnyBits>(
    path: &Path,
    capacity: usize,
) -> Result<(LibraryProducer<T>, LibraryConsumer<T>), String> {
    let what = |e: &dyn std::fmt::Display| format!("queue.library {}: {e}", path.display());
    // SAFETY: loading runs the library's initialisers; that the user's library is sound is
    // what `ring = "library"` asks the user to vouch for (docs/own-queue.md).
    // RTLD_NOW: a library with an unresolved symbol is refused here, not by the dynamic linker
    // killing the process in the middle of a run. Local: its names are not shared with others.
    let flags = libloading::os::unix::RTLD_NOW | libloading::os::unix::RTLD_LOCAL;
    let library: libloading::Library =
        unsafe { libloading::os::unix::Library::open(Some(path), flags) }
            .map_err(|e| what(&e))?
            .into();
    let abi: AbiFn = get(&library, "msgbench_queue_abi").map_err(|e| what(&e))?;
    // SAFETY: the header's signature; a library that exports the name with another breaks the
    // ABI it claims.
    let version = unsafe { abi() };
    if version != ABI_VERSION {
        return Err(what(&format!(
            "speaks msgbench queue ABI {version}, this msgbench speaks {ABI_VERSION}: rebuild it \
             against this msgbench's examples/queues/msgbench_queue.h"
        )));
    }
    let fns = (
        get::<CreateFn>(&library, "msgbench_queue_create"),
        get::<PushFn>(&library, "msgbench_queue_try_push"),
        get::<PopFn>(&library, "msgbench_queue_try_pop"),
        get::<LenFn>(&library, "msgbench_queue_len"),
        get::<DestroyFn>(&library, "msgbench_queue_destroy"),
    );
    let (Ok(create), Ok(try_push), Ok(try_pop), Ok(len), Ok(destroy)) = fns else {
        let missing = [
            fns.0.err(),
            fns.1.err(),
            fns.2.err(),
            fns.3.err(),
            fns.4.err(),
        ];
        return Err(what(
            &missing.into_iter().flatten().collect::<Vec<_>>().join("; "),
        ));
    };
    let raw = unsafe { create(capacity, std::mem::size_of::<T>()) };
    if raw.is_null() {
        return Err(what(&format!(
            "msgbench_queue_create({capacity}, {}) returned NULL",
            std::mem::size_of::<T>()
        )));
    }
    let queue = Arc::new(Queue {
        raw,
        try_push,
        try_pop,
        len,
        destroy,
        _library: library,
    });
    let producer = LibraryProducer {
        queue: queue.clone(),
        capacity,
        _items: PhantomData,
    };
    let consumer = LibraryConsumer {
        queue,
        _items: PhantomData,
    };
    Ok((producer, consumer))
}

impl<T: AnyBits> RingProducer<T> for LibraryProducer<T> {
    const TRUSTED: bool = false;

    #[inline]
    fn push(&mut self, value: T) -> Result<(), T> {
        let q = &*self.queue;
        // SAFETY: `value` is `size_of::<T>()` readable bytes, the size the queue was made for.
        let pushed = unsafe { (q.try_push)(q.raw, (&value as *const T).cast()) };
        if pushed != 0 {
            Ok(())
        } else {
            Err(value)
        }
    }

    fn is_full(&self) -> bool {
        // SAFETY: `raw` is live while this end is.
        unsafe { (self.queue.len)(self.queue.raw) >= self.capacity }
    }
}

impl<T: AnyBits> RingConsumer<T> for LibraryConsumer<T> {
    const TRUSTED: bool = false;

    #[inline]
    fn pop(&mut self) -> Option<T> {
        let q = &*self.queue;
        let mut slot = std::mem::MaybeUninit::<T>::zeroed();
        // SAFETY: `slot` has room for `size_of::<T>()` bytes; zeroed first, so a queue that
        // claims an item without writing one leaves a valid (zero) value, which any bit
        // pattern of `T: AnyBits` is.
        let popped = unsafe { (q.try_pop)(q.raw, slot.as_mut_ptr().cast()) };
        (popped != 0).then(|| unsafe { slot.assume_init() })
    }

    fn waiting(&self) -> usize {
        // SAFETY: `raw` is live while this end is.
        unsafe { (self.queue.len)(self.queue.raw) }
    }
}
