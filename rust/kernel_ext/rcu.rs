// SPDX-License-Identifier: GPL-2.0

//! RCU read-side sections proven by a type, and a box that RCU readers
//! reach through one load.
//!
//! Since v5.0 a region with bottom halves, preemption or interrupts off is
//! an RCU read-side critical section as much as one between
//! `rcu_read_lock` and `rcu_read_unlock`: `synchronize_rcu` waits for it
//! (kernel/rcu/tree.c, `synchronize_rcu`'s documentation). Softirq
//! handlers, and code under a lock taken with `spin_lock_bh`, are inside
//! one already; [`RcuRead`] says so without an `rcu_read_lock` of their
//! own, and [`RcuBox`] is read under any of them.

use crate::kernel_ext::softirq::InSoftirq;
use core::{
    marker::PhantomData,
    ptr::{
        null_mut,
        NonNull, //
    },
    sync::atomic::{
        AtomicPtr,
        Ordering, //
    },
};
use kernel::{
    prelude::*,
    sync::rcu, //
};

/// Proof that the code holding a reference to it is inside an RCU
/// read-side critical section, for as long as the reference lives.
///
/// # Invariants
///
/// Only references to it are handed out, each by a constructor whose
/// argument or caller proves such a section on this CPU for the
/// reference's lifetime. Neither `Send` nor `Sync`: a reference stays on
/// the thread (and so the CPU, or the preemptible RCU section) it was
/// made for.
pub(crate) struct RcuRead {
    _not_send: PhantomData<*mut ()>,
}

impl RcuRead {
    /// The one value every reference points to (a constant: it holds
    /// nothing).
    const PROOF: RcuRead = RcuRead {
        _not_send: PhantomData,
    };

    /// The section `rcu_read_lock` opened, for the guard's borrow.
    #[inline(always)]
    pub(crate) fn of_guard(_guard: &rcu::Guard) -> &RcuRead {
        // INVARIANT: the guard holds the read lock while it is borrowed.
        &Self::PROOF
    }

    /// The section a softirq handler is (bottom halves off), for the
    /// proof's borrow.
    #[inline(always)]
    pub(crate) fn of_softirq(_softirq: &InSoftirq) -> &RcuRead {
        // INVARIANT: bottom halves are off while the proof is borrowed
        // (`InSoftirq`'s invariant): an RCU read-side section.
        &Self::PROOF
    }

    /// A section the caller proves otherwise.
    ///
    /// # Safety
    ///
    /// On this CPU, an RCU read-side critical section lasts for all of
    /// `'a`: `rcu_read_lock` held, or bottom halves, preemption or
    /// interrupts off, and the thread does not leave it meanwhile.
    #[inline(always)]
    pub(crate) unsafe fn assume<'a>() -> &'a RcuRead {
        // INVARIANT: the caller's contract.
        &Self::PROOF
    }
}

/// A boxed value set at most once, which RCU readers reach with one load
/// and which [`RcuBox::revoke`] takes away from them, dropping it once
/// none can still see it: `SetOnce<KBox<Revocable<T>>>` in one atomic
/// pointer.
///
/// # Invariants
///
/// `ptr` is null (never set), [`RcuBox::revoked`] (set and taken away),
/// or the pointer of a `KBox<T>` this value owns; it changes only from
/// null to a box (`populate`), from a box to `revoked` (`revoke`, which
/// drops the box after a grace period), and never back. A box's address
/// is above `revoked`'s (a kernel address, `T` not zero-sized), so one
/// comparison tells a box from the other two.
pub(crate) struct RcuBox<T> {
    ptr: AtomicPtr<T>,
    _owns: PhantomData<KBox<T>>,
}

// SAFETY: The value owns a `T` (sent to whichever thread drops it):
// `Send` if `T` is.
unsafe impl<T: Send> Send for RcuBox<T> {}
// SAFETY: Shared references hand out `&T` on any thread (so `T: Sync`),
// and `revoke`, through a shared reference, drops the `T` on the calling
// thread (so `T: Send`).
unsafe impl<T: Send + Sync> Sync for RcuBox<T> {}

impl<T> RcuBox<T> {
    /// Not set.
    pub(crate) const fn new() -> Self {
        const { assert!(core::mem::size_of::<T>() > 0) };
        Self {
            ptr: AtomicPtr::new(null_mut()),
            _owns: PhantomData,
        }
    }

    /// The mark of a value taken away: `T`'s dangling address, never a
    /// box's.
    #[inline(always)]
    fn revoked() -> *mut T {
        NonNull::dangling().as_ptr()
    }

    /// Sets the value, once: `v` back if it was set before (and maybe
    /// revoked since).
    pub(crate) fn populate(&self, v: KBox<T>) -> Result<(), KBox<T>> {
        let p = KBox::into_raw(v);
        match self
            .ptr
            .compare_exchange(null_mut(), p, Ordering::AcqRel, Ordering::Acquire)
        {
            // INVARIANT: null to the box, whose ownership moved here.
            Ok(_) => Ok(()),
            // SAFETY: `p` came from `into_raw` just above and was not
            // stored: ownership goes back.
            Err(_) => Err(unsafe { KBox::from_raw(p) }),
        }
    }

    /// Whether the value was ever set (it may be revoked since).
    pub(crate) fn was_populated(&self) -> bool {
        !self.ptr.load(Ordering::Acquire).is_null()
    }

    /// The value, if set and not revoked, for the read section `_rcu`
    /// proves.
    #[inline(always)]
    pub(crate) fn get<'a>(&'a self, _rcu: &'a RcuRead) -> Option<&'a T> {
        let p = self.ptr.load(Ordering::Acquire);
        if p.addr() <= Self::revoked().addr() {
            return None;
        }
        // SAFETY: Above `revoked`, `p` is the owned box (type invariant),
        // loaded inside a read section that lasts for `'a` (`_rcu`):
        // `revoke` drops it only after a grace period that starts once
        // the pointer is no longer there, so after this section ends.
        Some(unsafe { &*p })
    }

    /// The value, if set and not revoked, inside a read section of its
    /// own.
    pub(crate) fn access(&self) -> Option<RcuRef<'_, T>> {
        let guard = rcu::read_lock();
        let p = NonNull::from(self.get(RcuRead::of_guard(&guard))?);
        // INVARIANT: `p` was reached inside `guard`'s section, which the
        // result holds.
        Some(RcuRef {
            _guard: guard,
            p,
            _borrow: PhantomData,
        })
    }

    /// Takes the value away from readers and drops it once none can see
    /// it. `Some(true)` for the call that did, `Some(false)` for any
    /// other call on a value set (which may return before that drop is
    /// done), `None` if it was never set. Process context: it may sleep.
    pub(crate) fn revoke(&self) -> Option<bool> {
        if self.ptr.load(Ordering::Acquire).is_null() {
            return None;
        }
        // Never null again once set (type invariant).
        let p = self.ptr.swap(Self::revoked(), Ordering::AcqRel);
        if p == Self::revoked() {
            return Some(false);
        }
        // Every reader that may have loaded `p` is in a read section that
        // began before the swap: over once the grace period is.
        rcu::synchronize_rcu();
        // SAFETY: `p` is the owned box (type invariant), no longer
        // reachable by readers (above); the swap gave it to this call
        // alone.
        drop(unsafe { KBox::from_raw(p) });
        Some(true)
    }
}

impl<T> Drop for RcuBox<T> {
    fn drop(&mut self) {
        let p = *self.ptr.get_mut();
        if p.addr() > Self::revoked().addr() {
            // SAFETY: An owned box (type invariant); `&mut self`: no reader
            // holds a reference into it.
            drop(unsafe { KBox::from_raw(p) });
        }
    }
}

/// A value of an [`RcuBox`], with the read section that keeps it.
///
/// # Invariants
///
/// `p` was loaded from the box inside `_guard`'s section, so it is valid
/// while the guard lives; `'a` borrows the box.
pub(crate) struct RcuRef<'a, T> {
    _guard: rcu::Guard,
    p: NonNull<T>,
    _borrow: PhantomData<&'a T>,
}

impl<T> core::ops::Deref for RcuRef<'_, T> {
    type Target = T;

    fn deref(&self) -> &T {
        // SAFETY: Valid while the guard lives (type invariant), so for the
        // borrow of `self`.
        unsafe { self.p.as_ref() }
    }
}

#[kunit_tests(riser_rcu)]
mod tests {
    use super::*;
    use core::sync::atomic::AtomicU32;

    /// Counts its drops.
    struct Counted<'a>(&'a AtomicU32, u32);

    impl Drop for Counted<'_> {
        fn drop(&mut self) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }

    #[test]
    fn a_box_is_set_once_read_and_revoked_once() -> Result {
        let drops = AtomicU32::new(0);
        let b = RcuBox::new();
        assert!(!b.was_populated());
        assert!(b.access().is_none());
        assert!(b
            .populate(KBox::new(Counted(&drops, 7), GFP_KERNEL)?)
            .is_ok());
        assert!(b.was_populated());
        // A second value is given back, not kept.
        let again = b.populate(KBox::new(Counted(&drops, 8), GFP_KERNEL)?);
        assert!(again.is_err_and(|v| v.1 == 8));
        assert_eq!(drops.load(Ordering::Relaxed), 1);
        assert_eq!(b.access().map(|v| v.1), Some(7));
        let guard = rcu::read_lock();
        assert_eq!(b.get(RcuRead::of_guard(&guard)).map(|v| v.1), Some(7));
        drop(guard);
        assert_eq!(b.revoke(), Some(true));
        assert_eq!(drops.load(Ordering::Relaxed), 2);
        assert_eq!(b.revoke(), Some(false));
        assert!(b.access().is_none());
        assert!(b.was_populated());
        // Revoked for good: not set again.
        assert!(b
            .populate(KBox::new(Counted(&drops, 9), GFP_KERNEL)?)
            .is_err());
        drop(b);
        assert_eq!(drops.load(Ordering::Relaxed), 3);
        Ok(())
    }

    #[test]
    fn a_box_never_set_revokes_nothing_and_one_set_drops_with_it() -> Result {
        let drops = AtomicU32::new(0);
        let b = RcuBox::<Counted<'_>>::new();
        assert_eq!(b.revoke(), None);
        // Not revoked: still settable.
        assert!(b
            .populate(KBox::new(Counted(&drops, 1), GFP_KERNEL)?)
            .is_ok());
        drop(b);
        assert_eq!(drops.load(Ordering::Relaxed), 1);
        Ok(())
    }
}
