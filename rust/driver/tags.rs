// SPDX-License-Identifier: GPL-2.0

//! What each send tag of a connection carries, and the pool of unsolicited
//! Data-Out headers.

use kernel::num::casts::FromSafeCast;
use kernel::sync::atomic::{
    Acquire,
    Atomic,
    Full,
    Relaxed,
    Release, //
};
use kernel::{
    alloc::KVec,
    new_spinlock_irq,
    prelude::*,
    sync::SpinLockIrq, //
};

/// Control buffers: two, as iscsid sends the next login or text request as
/// soon as the answer to the previous one arrives, which can be before the
/// completion of that request's SEND has been reaped (the receive and the
/// send complete on the same CQ, in either order).
pub(super) const CTRL_TX: u32 = 2;

/// What a send tag's work request is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum SendTag {
    /// A control buffer's SEND (login, text, NOP-Out with data).
    Ctrl(u32),
    /// A task slot's SEND: its command, or a control PDU of its task.
    Slot(u32),
    /// An unsolicited Data-Out header's SEND.
    DataOut(u32),
    /// The signaled LOCAL_INV of a task slot's MR.
    Inv(u32),
    /// The marker posted behind everything once the target hung up: its
    /// completion comes after every receive that came before.
    Marker,
}

/// How a connection numbers its send tags: the control buffers, then one
/// per task slot, then one per Data-Out header, then one per MR (one MR
/// per task slot), then the marker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct TagMap {
    pub(super) cmds: u32,
    pub(super) dataouts: u32,
}

impl TagMap {
    /// How many tags the connection needs (`None`: more than a `u32`).
    pub(super) fn count(self) -> Option<u32> {
        CTRL_TX
            .checked_add(self.cmds)?
            .checked_add(self.dataouts)?
            .checked_add(self.cmds)?
            .checked_add(1)
    }

    /// The number of tag `t` (which the caller made for this map).
    pub(super) fn tag(self, t: SendTag) -> u32 {
        match t {
            SendTag::Ctrl(i) => i,
            SendTag::Slot(i) => CTRL_TX + i,
            SendTag::DataOut(i) => CTRL_TX + self.cmds + i,
            SendTag::Inv(i) => CTRL_TX + self.cmds + self.dataouts + i,
            SendTag::Marker => CTRL_TX + self.cmds + self.dataouts + self.cmds,
        }
    }

    /// What tag number `tag` is; `None` beyond the map.
    pub(super) fn kind(self, tag: u32) -> Option<SendTag> {
        let Some(i) = tag.checked_sub(CTRL_TX) else {
            return Some(SendTag::Ctrl(tag));
        };
        if i < self.cmds {
            return Some(SendTag::Slot(i));
        }
        let i = i - self.cmds;
        if i < self.dataouts {
            return Some(SendTag::DataOut(i));
        }
        let i = i - self.dataouts;
        if i < self.cmds {
            return Some(SendTag::Inv(i));
        }
        (i == self.cmds).then_some(SendTag::Marker)
    }
}

/// The unsolicited Data-Out headers of a connection: which are free, how
/// many of the free ones no command being sent has reserved, and whose
/// Data-Out each one carries.
///
/// A WRITE reserves all the headers it needs before anything of it is
/// posted ([`DataOutPool::reserve`]), takes them one by one as it posts
/// its Data-Outs, and the reservation gives back what it did not take when
/// it goes; each completion gives its header back ([`DataOutPool::done`]).
pub(super) struct DataOutPool {
    free: Pin<KBox<SpinLockIrq<KVec<u32>>>>,
    /// Free headers not reserved.
    avail: Atomic<u32>,
    /// Headers granted ([`DataOutPool::grant`]).
    size: Atomic<u32>,
    /// By header: the task slot of the command whose Data-Out it carries,
    /// written before its post, read by its completion.
    owner: KVec<Atomic<u32>>,
}

impl DataOutPool {
    /// A pool with room for `n` headers, none of them there yet
    /// ([`DataOutPool::grant`]).
    pub(super) fn new(n: u32) -> Result<Self> {
        let free = KVec::with_capacity(usize::from_safe_cast(n), GFP_KERNEL)?;
        let mut owner = KVec::with_capacity(usize::from_safe_cast(n), GFP_KERNEL)?;
        for _ in 0..n {
            owner.push(Atomic::new(0), GFP_KERNEL)?;
        }
        Ok(Self {
            free: KBox::pin_init(new_spinlock_irq!(free, "riser_dataout_free"), GFP_KERNEL)?,
            avail: Atomic::new(0),
            size: Atomic::new(0),
            owner,
        })
    }

    /// Headers `0..n` (at most the room) are there and free; once (the
    /// pool is given its headers at bind). Allocates nothing.
    pub(super) fn grant(&self, n: u32) {
        let n = n.min(u32::try_from(self.owner.len()).unwrap_or(u32::MAX));
        let mut free = self.free.lock();
        if self.size.load(Relaxed) != 0 {
            return;
        }
        for i in (0..n).rev() {
            // Within the capacity made for every header: no allocation.
            if free.push(i, GFP_ATOMIC).is_err() {
                return;
            }
            self.size.fetch_add(1, Relaxed);
            self.avail.fetch_add(1, Full);
        }
    }

    /// Headers the pool has (free or not).
    pub(super) fn size(&self) -> u32 {
        self.size.load(Relaxed)
    }

    /// Reserves `n` headers for one command; `None` if fewer are free.
    pub(super) fn reserve(&self, n: u32) -> Option<Reserved<'_>> {
        if n > 0 {
            let mut a = self.avail.load(Relaxed);
            loop {
                match self.avail.cmpxchg(a, a.checked_sub(n)?, Full) {
                    Ok(_) => break,
                    Err(now) => a = now,
                }
            }
        }
        Some(Reserved {
            pool: self,
            left: n,
        })
    }

    /// Header `i`'s SEND completed (or was flushed): the header is free
    /// again. Returns the task slot whose Data-Out it carried.
    pub(super) fn done(&self, i: u32) -> Option<u32> {
        let owner = self.owner.get(usize::from_safe_cast(i))?.load(Acquire);
        // The list has room for every header: it was made with all.
        self.free.lock().push(i, GFP_ATOMIC).ok()?;
        self.avail.fetch_add(1, Full);
        Some(owner)
    }
}

/// Headers reserved for one command and not taken yet; given back when it
/// goes.
pub(super) struct Reserved<'a> {
    pool: &'a DataOutPool,
    left: u32,
}

impl Reserved<'_> {
    /// How many are left.
    pub(super) fn left(&self) -> u32 {
        self.left
    }

    /// Takes one for a Data-Out of the command on task slot `owner`;
    /// `None` if none is left.
    pub(super) fn take(&mut self, owner: u32) -> Option<u32> {
        if self.left == 0 {
            return None;
        }
        let i = self.pool.free.lock().pop()?;
        self.left -= 1;
        if let Some(o) = self.pool.owner.get(usize::from_safe_cast(i)) {
            o.store(owner, Release);
        }
        Some(i)
    }

    /// Gives back header `i`, taken and not posted after all.
    pub(super) fn untake(&mut self, i: u32) {
        // The list has room for every header: it was made with all.
        let _ = self.pool.free.lock().push(i, GFP_ATOMIC);
        self.left += 1;
    }
}

impl Drop for Reserved<'_> {
    fn drop(&mut self) {
        if self.left > 0 {
            self.pool.avail.fetch_add(self.left, Full);
        }
    }
}
