// SPDX-License-Identifier: GPL-2.0

//! What a connection sends from: the buffers of control PDUs and of
//! unsolicited Data-Outs, the send tags' map and the count that spaces
//! the signaled inline SENDs. The send path (`send.rs`) fills and posts
//! them; the completions (`recv.rs`) give them back.

use super::{
    tags::{
        DataOutPool,
        TagMap,
        CTRL_TX, //
    },
    LOGIN_DATA, //
};
use crate::{
    proto::{
        pdu::HEADERS_LEN,
        sizing::DATAOUT_SLOTS_PER_CMD, //
    },
    rdma::{
        conn::{
            BufRef,
            DmaBuf,
            DmaBufs, //
        },
        DeviceRef, //
    },
};
use kernel::num::casts::FromSafeCast;
use kernel::sync::atomic::{
    Atomic,
    Relaxed, //
};
use kernel::{
    dma::DataDirection,
    prelude::*,
    sync::{
        Arc,
        SetOnce, //
    },
};

/// Alignment of the send buffers carved from one chunk: a cache line.
pub(super) const HEADER_ALIGN: usize = 64;

/// What the send path owns:
/// the buffers PDUs are sent from, and the count
/// that spaces the signaled inline SENDs.
pub(super) struct Tx {
    /// Buffers of control PDUs that carry data (login, text, NOP-Out with
    /// ping data), sent on tags `0..CTRL_TX`.
    ctrl_tx: Arc<DmaBufs>,
    /// The buffers of the session's tasks, made at bind
    /// ([`Tx::give_task_bufs`]).
    task: SetOnce<TaskBufs>,
    /// Which Data-Out headers are free (none until the task buffers are
    /// given).
    dataouts: DataOutPool,
    /// What each send tag carries.
    tags: TagMap,
    /// Inline command SENDs sent (wrapping): the one whose count is a
    /// multiple of the signal interval (`proto::sizing::signal_interval`,
    /// a power of two) is signaled. Counted by `xmit_task`, which libiscsi
    /// runs under the session's `frwd_lock` (one connection per session):
    /// one writer at a time, so a plain load and store. (Were it not so, a
    /// SEND would only be signaled a little early or late: the send
    /// queue's sizing leaves room for that, and nothing else depends on
    /// it.)
    inline_sent: Atomic<u32>,
    /// The signal interval less one: a count is a multiple of the
    /// interval when none of these bits is set.
    signal_mask: u32,
}

/// The send buffers a session's tasks use, as many as it has tasks: one
/// header buffer per task slot (command and control PDUs) and
/// `DATAOUT_SLOTS_PER_CMD` per task slot for unsolicited Data-Outs. Made
/// at bind, in process context, outside any read-side section.
pub(super) struct TaskBufs {
    dataout: Arc<DmaBufs>,
}

impl TaskBufs {
    /// The Data-Out header buffers of `tasks` task slots on `dev`: carved
    /// from a few chunks (one allocation and mapping for many buffers),
    /// each on cache lines of its own, so that two CPUs writing two
    /// headers do not share a line. (A slot's command header buffer is
    /// its command slot's: `CmdSlotsMade`.)
    pub(super) fn new(dev: &DeviceRef, tasks: u32) -> Result<Self> {
        let n = tasks.checked_mul(DATAOUT_SLOTS_PER_CMD).ok_or(EINVAL)?;
        Ok(Self {
            dataout: DmaBuf::carve(
                dev,
                HEADERS_LEN,
                usize::from_safe_cast(n),
                HEADER_ALIGN,
                DataDirection::ToDevice,
            )?,
        })
    }
}

impl Tx {
    /// The send buffers, on `dev`, of a connection whose send tags `tags`
    /// numbers (the tasks' come at bind: [`Tx::give_task_bufs`]),
    /// signaling one inline command SEND in `signal_interval`
    /// (`proto::sizing::signal_interval`, a power of two; another number
    /// counts as the largest power of two below it, 0 as 1).
    pub(super) fn new(dev: &DeviceRef, tags: TagMap, signal_interval: u32) -> Result<Self> {
        Ok(Self {
            ctrl_tx: DmaBuf::carve(
                dev,
                HEADERS_LEN + LOGIN_DATA,
                usize::from_safe_cast(CTRL_TX),
                HEADER_ALIGN,
                DataDirection::ToDevice,
            )?,
            task: SetOnce::default(),
            dataouts: DataOutPool::new(tags.dataouts)?,
            tags,
            inline_sent: Atomic::new(0),
            signal_mask: (1 << signal_interval.checked_ilog2().unwrap_or(0)) - 1,
        })
    }

    /// Gives the session's task buffers, once (`EBUSY` after; `EINVAL` if
    /// there are more than the send tags number): their Data-Out headers
    /// join the pool. Allocates nothing.
    pub(super) fn give_task_bufs(&self, b: TaskBufs) -> Result {
        let n = u32::try_from(b.dataout.len())?;
        if n > self.tags.dataouts {
            return Err(EINVAL);
        }
        if !self.task.populate(b) {
            return Err(EBUSY);
        }
        self.dataouts.grant(n);
        Ok(())
    }

    /// Whether the task slots' buffers were given (at bind).
    pub(super) fn has_task_bufs(&self) -> bool {
        self.task.as_ref().is_some()
    }

    /// Data-Out header `h` (`None` before bind or beyond the pool).
    pub(super) fn dataout(&self, h: u32) -> Option<BufRef<'_>> {
        self.task.as_ref()?.dataout.get(usize::from_safe_cast(h))
    }

    /// Unsolicited Data-Out headers the connection has (0 before bind).
    pub(super) fn dataout_count(&self) -> u32 {
        self.dataouts.size()
    }

    /// What each send tag carries.
    pub(super) fn tags(&self) -> TagMap {
        self.tags
    }

    /// Which Data-Out headers are free.
    pub(super) fn dataouts(&self) -> &DataOutPool {
        &self.dataouts
    }

    /// Control PDU buffer `tag` (`0..CTRL_TX`).
    pub(super) fn ctrl_buf(&self, tag: u32) -> Option<BufRef<'_>> {
        self.ctrl_tx.get(usize::from_safe_cast(tag))
    }

    /// Whether the next inline command SEND is signaled: one in the
    /// signal interval is (counted by `inline_sent`).
    #[inline(always)]
    pub(super) fn inline_signaled(&self) -> bool {
        let n = self.inline_sent.load(Relaxed);
        self.inline_sent.store(n.wrapping_add(1), Relaxed);
        n & self.signal_mask == 0
    }
}
