// SPDX-License-Identifier: GPL-2.0

//! Softirq context, proven by a type instead of checked per call.

use core::marker::PhantomData;

/// Proof that the code holding a reference to it runs in a softirq
/// handler: bottom halves are off (the handler is one), interrupts are
/// on, and this is neither a hard interrupt nor an NMI. Code that may
/// only run there (or that would otherwise check for it on every call)
/// takes `&InSoftirq`.
///
/// # Invariants
///
/// Made only by [`InSoftirq::new`], whose caller runs in such a handler
/// and lends the value out only by reference, for no longer than the
/// handler runs. Neither `Send`, `Sync`, `Clone` nor `Copy`: a reference
/// cannot leave the handler's thread, nor outlive the value (the caller's
/// local), so it is never held outside the handler.
pub(crate) struct InSoftirq {
    _not_send: PhantomData<*mut ()>,
}

impl InSoftirq {
    /// The proof, for a softirq handler to lend by reference.
    ///
    /// # Safety
    ///
    /// The caller runs in a softirq handler, entered from the kernel's
    /// softirq processing (bottom halves off, interrupts on, not a hard
    /// interrupt or an NMI), keeps the value a local of its own, lends it
    /// only by reference, and drops it before it returns.
    #[inline(always)]
    pub(crate) unsafe fn new() -> Self {
        // INVARIANT: the caller's contract.
        Self {
            _not_send: PhantomData,
        }
    }
}
