// SPDX-License-Identifier: GPL-2.0

//! A workqueue of the module's own, reachable from a static: work handed
//! to it from anywhere in the module runs on it, and the registration that
//! made it drains and destroys it when dropped, so no work of the module
//! is left queued or running once the registration is gone (the system
//! queues of `kernel::workqueue` cannot be drained by a module).

use crate::bindings;
use core::{
    ptr::null_mut,
    sync::atomic::{
        AtomicPtr,
        Ordering, //
    },
};
use kernel::{
    alloc::KBox,
    impl_has_work, new_work,
    prelude::*,
    sync::{
        rcu,
        Arc, //
    },
    workqueue::{
        HasWork,
        Queue,
        Work,
        WorkItem, //
    },
};

/// Where a module's own workqueue is found, in a static.
///
/// # Invariants
///
/// `queue` is null or a workqueue made by `riser_alloc_workqueue` that is
/// not destroyed before a grace period has passed since `queue` was set
/// back to null. Only [`QueueReg`] (one at a time) sets it to non-null and
/// back.
pub(crate) struct ModQueue {
    queue: AtomicPtr<bindings::workqueue_struct>,
}

impl ModQueue {
    /// An empty place, for a static.
    pub(crate) const fn new() -> Self {
        Self {
            queue: AtomicPtr::new(null_mut()),
        }
    }

    /// Makes the workqueue `name` and puts it here until the returned
    /// registration drops. `EBUSY` if a registration holds this place.
    pub(crate) fn register(&'static self, name: &'static CStr) -> Result<QueueReg> {
        // SAFETY: `name` is a NUL-terminated string that outlives the
        // queue (it is static); the helper formats it with "%s".
        let q = unsafe { bindings::riser_alloc_workqueue(name.as_char_ptr()) };
        if q.is_null() {
            return Err(ENOMEM);
        }
        if self
            .queue
            .compare_exchange(null_mut(), q, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            // SAFETY: `q` was made just above and never published.
            unsafe { bindings::destroy_workqueue(q) };
            return Err(EBUSY);
        }
        // INVARIANT: the one registration of this place holds it.
        Ok(QueueReg { place: self })
    }

    /// Runs `f` on the workqueue. Hands `f` back if there is none (not
    /// made yet, or being destroyed) or the work item cannot be allocated:
    /// the caller then runs it itself. May sleep (it allocates).
    pub(crate) fn spawn<F: FnOnce() + Send + 'static>(&self, f: F) -> Result<(), F> {
        // Allocated empty, so `f` is still the caller's if this fails.
        let Ok(mut job) = KBox::pin_init(
            pin_init!(Job {
                work <- new_work!("riser::wq::Job"),
                func: None,
            }),
            GFP_KERNEL,
        ) else {
            return Err(f);
        };
        *job.as_mut().project().func = Some(f);
        let guard = rcu::read_lock();
        let q = self.queue.load(Ordering::Acquire);
        if q.is_null() {
            drop(guard);
            return match job.as_mut().project().func.take() {
                Some(f) => Err(f),
                None => Ok(()),
            };
        }
        // SAFETY: A non-null queue loaded inside a read section is not
        // destroyed before the section ends (type invariant), and the
        // borrow ends within it.
        let queue = unsafe { Queue::from_raw(q.cast()) };
        queue.enqueue(job);
        drop(guard);
        Ok(())
    }

    /// Queues `item`'s own work on the workqueue, without allocating (any
    /// context). Hands `item` back if there is no queue (not made yet, or
    /// being destroyed) or its work is queued already: that queued run is
    /// still to come.
    pub(crate) fn enqueue<T>(&self, item: Arc<T>) -> Result<(), Arc<T>>
    where
        T: WorkItem<Pointer = Arc<T>> + HasWork<T> + Send + Sync + 'static,
    {
        let guard = rcu::read_lock();
        let q = self.queue.load(Ordering::Acquire);
        if q.is_null() {
            drop(guard);
            return Err(item);
        }
        // SAFETY: A non-null queue loaded inside a read section is not
        // destroyed before the section ends (type invariant), and the
        // borrow ends within it.
        let queue = unsafe { Queue::from_raw(q.cast()) };
        let r = queue.enqueue(item);
        drop(guard);
        r
    }
}

/// The registration of a [`ModQueue`]'s workqueue: dropping it waits for
/// every work queued on it, then destroys it.
pub(crate) struct QueueReg {
    place: &'static ModQueue,
}

impl Drop for QueueReg {
    fn drop(&mut self) {
        let q = self.place.queue.swap(null_mut(), Ordering::AcqRel);
        // Spawners that saw the queue have queued on it; later ones run
        // their work themselves.
        rcu::synchronize_rcu();
        if !q.is_null() {
            // SAFETY: `q` was made by `register` and is destroyed once: the
            // place is empty and every reader's section has ended. It runs
            // every work still queued first.
            unsafe { bindings::destroy_workqueue(q) };
        }
    }
}

/// One function run on a [`ModQueue`].
#[pin_data]
struct Job<F> {
    #[pin]
    work: Work<Job<F>>,
    func: Option<F>,
}

impl_has_work! {
    impl{F} HasWork<Self> for Job<F> { self.work }
}

impl<F: FnOnce() + Send + 'static> WorkItem for Job<F> {
    type Pointer = Pin<KBox<Self>>;

    fn run(mut this: Pin<KBox<Self>>) {
        if let Some(f) = this.as_mut().project().func.take() {
            f();
        }
    }
}

#[kunit_tests(riser_wq)]
mod tests {
    use super::*;
    use core::sync::atomic::AtomicU32;
    use kernel::time::{
        delay::fsleep,
        Delta, //
    };

    static PLACE: ModQueue = ModQueue::new();
    static RAN: AtomicU32 = AtomicU32::new(0);

    #[test]
    fn dropping_the_registration_runs_every_queued_work_first() {
        let Ok(reg) = PLACE.register(c"riser_wq_test") else {
            panic!("cannot make the test queue");
        };
        // One registration of a place at a time.
        assert!(matches!(PLACE.register(c"riser_wq_test2"), Err(e) if e == EBUSY));
        let start = RAN.load(Ordering::Acquire);
        for _ in 0..8 {
            let queued = PLACE.spawn(|| {
                fsleep(Delta::from_millis(5));
                RAN.fetch_add(1, Ordering::AcqRel);
            });
            assert!(queued.is_ok());
        }
        drop(reg);
        assert_eq!(RAN.load(Ordering::Acquire), start + 8);
        // Without a queue the work comes back, for the caller to run.
        match PLACE.spawn(|| {
            RAN.fetch_add(100, Ordering::AcqRel);
        }) {
            Ok(()) => panic!("spawned on a destroyed queue"),
            Err(f) => f(),
        }
        assert_eq!(RAN.load(Ordering::Acquire), start + 108);
    }

    static ITEM_PLACE: ModQueue = ModQueue::new();

    /// A work item that counts its runs, the first one slowly.
    #[pin_data]
    struct Item {
        #[pin]
        work: Work<Item>,
        runs: AtomicU32,
    }

    kernel::impl_has_work! {
        impl HasWork<Item> for Item { self.work }
    }

    impl WorkItem for Item {
        type Pointer = Arc<Item>;

        fn run(this: Arc<Item>) {
            if this.runs.fetch_add(1, Ordering::AcqRel) == 0 {
                fsleep(Delta::from_millis(50));
            }
        }
    }

    #[test]
    fn an_item_queues_once_at_a_time_and_runs_before_the_queue_goes() -> Result {
        let item = Arc::pin_init(
            pin_init!(Item {
                work <- kernel::new_work!("riser_wq_test_item"),
                runs: AtomicU32::new(0),
            }),
            GFP_KERNEL,
        )?;
        // No queue: the item comes back.
        assert!(ITEM_PLACE.enqueue(item.clone()).is_err());
        let reg = ITEM_PLACE.register(c"riser_wq_item")?;
        assert!(ITEM_PLACE.enqueue(item.clone()).is_ok());
        // Queued (or running its slow first run): queued once more at most.
        let again = ITEM_PLACE.enqueue(item.clone()).is_ok();
        drop(reg);
        let runs = item.runs.load(Ordering::Acquire);
        assert_eq!(runs, if again { 2 } else { 1 });
        // The queue is gone: the item comes back again.
        assert!(ITEM_PLACE.enqueue(item.clone()).is_err());
        assert_eq!(item.runs.load(Ordering::Acquire), runs);
        Ok(())
    }
}
