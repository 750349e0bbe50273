// SPDX-License-Identifier: GPL-2.0

//! Where libiscsi's session locks may be taken.
//!
//! libiscsi takes a session's `frwd_lock` and `back_lock` with bottom
//! halves off, and calls the transport's `init_task` and `xmit_task` with
//! `frwd_lock` held (the layer's hosts have no transmit workqueue, so
//! `iscsi_queuecommand`, `iscsi_conn_send_pdu` and the receive path's
//! NOP-Out all transmit under it). What the layer offers the transport
//! that takes those locks ([`super::Conn::complete_pdu`], a connection's
//! failure, the last put of a [`super::TaskRef`]) checks here first: inside
//! such a callback, in hard interrupt context or with interrupts off it
//! refuses or defers instead of deadlocking.

use crate::{
    bindings,
    kernel_ext::rcu::RcuRead, //
};
use core::marker::PhantomData;
use kernel::prelude::*;

/// This CPU runs a transport callback that libiscsi calls under a session
/// lock, for as long as the value lives: the layer's `init_task` and
/// `xmit_task` trampolines make one around the transport's code.
///
/// # Invariants
///
/// Made by [`LockedCallback::enter`], which marked the CPU, with bottom
/// halves off on it for the value's whole life (its caller's contract):
/// the thread stays on the CPU (and on `PREEMPT_RT`, where bottom halves
/// off only keep it from migrating, `enter` turned preemption off), and
/// no softirq handler starts on the CPU while the mark is set. Neither
/// `Send` nor `Sync`, so it is dropped (unmarking the same CPU) on the
/// thread that made it.
pub(super) struct LockedCallback {
    _not_send: PhantomData<*mut ()>,
}

impl LockedCallback {
    /// Marks this CPU until the value is dropped.
    ///
    /// # Safety
    ///
    /// Bottom halves are off on this CPU (a lock libiscsi takes with
    /// `spin_lock_bh`, or a softirq handler) from this call until the
    /// value is dropped, and the code that runs while it lives is given no
    /// [`InSoftirq`](crate::kernel_ext::softirq::InSoftirq) (a transport
    /// callback that libiscsi calls with its task only).
    #[inline]
    pub(super) unsafe fn enter() -> Self {
        // SAFETY: No arguments; it counts this CPU's mark (and on
        // PREEMPT_RT turns preemption off), undone by `drop` on this
        // thread, which bottom halves off keep on this CPU (function
        // contract).
        unsafe { bindings::riser_iscsi_locked_enter() };
        // INVARIANT: the CPU was marked just above, bottom halves are off
        // for the value's life (function contract).
        Self {
            _not_send: PhantomData,
        }
    }

    /// The RCU read-side section the callback is in, for the borrow.
    #[inline(always)]
    pub(super) fn rcu(&self) -> &RcuRead {
        // SAFETY: Bottom halves are off on this CPU for the value's whole
        // life, which the borrow does not outlast, and the thread stays
        // on the CPU (type invariant): an RCU read-side section.
        unsafe { RcuRead::assume() }
    }
}

impl Drop for LockedCallback {
    #[inline]
    fn drop(&mut self) {
        // SAFETY: `enter` marked this CPU (type invariant), and the thread
        // is still on it: this undoes the mark, once.
        unsafe { bindings::riser_iscsi_locked_exit() };
    }
}

/// Whether libiscsi's session locks may be taken here: not inside a
/// [`LockedCallback`] of this CPU, not in hard interrupt or NMI context,
/// with interrupts on. A preemptible caller is never inside one: a marked
/// callback runs with bottom halves off, so nothing else runs on its CPU
/// but hard interrupts.
#[inline]
pub(super) fn may_lock() -> bool {
    lock_context() >= 0
}

/// As [`may_lock`], saying how: negative where the session locks may not
/// be taken, 0 where they may with bottom halves off already (softirq
/// context, or turned off), 1 where they may once bottom halves are off.
#[inline]
fn lock_context() -> c_int {
    // SAFETY: No arguments; it reads this CPU's mark and its context.
    unsafe { bindings::riser_iscsi_lock_context() }
}

/// Whether a lock libiscsi takes with bottom halves off may be taken here,
/// the mark of [`LockedCallback`] aside: not in hard interrupt or NMI
/// context, with interrupts on.
#[inline]
pub(super) fn bh_lock_allowed() -> bool {
    // SAFETY: No arguments; it reads this CPU's context.
    unsafe { bindings::riser_bh_lock_allowed() }
}

/// Bottom halves are off on this CPU for as long as the value lives: off
/// already (softirq context, the receive path's), or turned off by the
/// value.
///
/// # Invariants
///
/// Made by [`BhOff::if_may_lock`] where [`may_lock`] held: bottom halves
/// were off already and `disabled` is false (the layer holds the value
/// only around one call into libiscsi, which leaves them as it found
/// them), or it disabled them and `disabled` is true (enabling them again
/// is allowed there). Neither `Send` nor `Sync`, so it is dropped on the
/// same CPU.
pub(super) struct BhOff {
    disabled: bool,
    _not_send: PhantomData<*mut ()>,
}

impl BhOff {
    /// Bottom halves off, if libiscsi's session locks may be taken here
    /// ([`may_lock`]); `None` otherwise. In softirq context, the receive
    /// path's, they are off already and nothing is done.
    #[inline]
    pub(super) fn if_may_lock() -> Option<Self> {
        let ctx = lock_context();
        if ctx < 0 {
            return None;
        }
        let disabled = ctx > 0;
        if disabled {
            // SAFETY: No arguments; undone by `drop`, on this CPU (bottom
            // halves off keep the thread on it), with interrupts on and
            // outside a hard interrupt (checked just above), where enabling
            // them is allowed.
            unsafe { bindings::riser_local_bh_disable() };
        }
        // INVARIANT: off already, or disabled just above, where `may_lock`
        // held.
        Some(Self {
            disabled,
            _not_send: PhantomData,
        })
    }
}

impl Drop for BhOff {
    #[inline]
    fn drop(&mut self) {
        if self.disabled {
            // SAFETY: `if_may_lock` disabled bottom halves on this CPU
            // (type invariant); this enables them once.
            unsafe { bindings::riser_local_bh_enable() };
        }
    }
}

#[kunit_tests(riser_iscsi_context)]
mod tests {
    use super::*;

    #[test]
    fn a_locked_callback_refuses_the_session_locks() {
        // A test runs in process context, interrupts on, nothing marked.
        assert!(may_lock() && bh_lock_allowed());
        let bh = BhOff::if_may_lock();
        assert!(bh.is_some());
        // Bottom halves off: the session locks may still be taken.
        assert!(may_lock());
        {
            // SAFETY: Bottom halves are off (`bh`) until both marks are
            // dropped, at the end of this block.
            let _outer = unsafe { LockedCallback::enter() };
            // SAFETY: As above.
            let inner = unsafe { LockedCallback::enter() };
            assert!(!may_lock());
            assert!(BhOff::if_may_lock().is_none());
            // A put may still take the back_lock (libiscsi's own order).
            assert!(bh_lock_allowed());
            drop(inner);
            // Nested marks count.
            assert!(!may_lock());
        }
        assert!(may_lock());
        drop(bh);
        assert!(may_lock());
    }
}
