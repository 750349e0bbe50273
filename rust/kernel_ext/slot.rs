// SPDX-License-Identifier: GPL-2.0

//! Exclusive slots, proven by a type: the sole use, for a while, of one
//! numbered slot of one domain (a libiscsi session's task `i`), shown by
//! the code that owns the slot, so that what the slot indexes elsewhere
//! (an RDMA connection's command slot `i`) needs no lock or atomic of its
//! own to be used by one CPU at a time.

use core::marker::PhantomData;

/// What a slot number is relative to: the address of the object that
/// owns the slots (a session). Two live owners have two addresses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SlotDomain(usize);

impl SlotDomain {
    /// The domain of the slots `owner` owns.
    pub(crate) fn of<T>(owner: *const T) -> Self {
        Self(owner.addr())
    }
}

/// The sole use of slot `index` of `domain` for `'a`.
///
/// # Invariants
///
/// While this value lives, no other `SlotToken` of the same domain and
/// index does, and the drop of the previous one happened before this one
/// was made (made only by [`SlotToken::new`], whose caller proves it).
/// Neither `Send`, `Sync`, `Clone` nor `Copy`: it is used on the thread
/// that made it, once.
pub(crate) struct SlotToken<'a> {
    domain: SlotDomain,
    index: u32,
    _p: PhantomData<(&'a (), *mut ())>,
}

impl SlotToken<'_> {
    /// The token of slot `index` of `domain`.
    ///
    /// # Safety
    ///
    /// For the token's lifetime no other token of `domain` and `index`
    /// lives, and the drop of the previous one happened before this call
    /// (the two are made under one lock, for instance).
    #[inline(always)]
    pub(crate) unsafe fn new(domain: SlotDomain, index: u32) -> Self {
        // INVARIANT: the caller's contract.
        Self {
            domain,
            index,
            _p: PhantomData,
        }
    }

    /// The slot's domain.
    #[inline(always)]
    pub(crate) fn domain(&self) -> SlotDomain {
        self.domain
    }

    /// The slot's number.
    #[inline(always)]
    pub(crate) fn index(&self) -> u32 {
        self.index
    }
}
