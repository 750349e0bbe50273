// SPDX-License-Identifier: GPL-2.0

//! A connected iSER connection's resources: the QP, its buffers and the
//! command bookkeeping, made when the route resolves and dropped at teardown.

use super::{
    conn::IserConn,
    device::DevUse,
    memory::{
        Slot,
        Track, //
    },
    stats::Counters,
    tags::{
        DataOutPool,
        SendTag,
        TagMap,
        CTRL_TX, //
    },
    LOGIN_DATA, //
};
use crate::{
    proto::{
        iser::{
            IserHeader,
            ISER_HDR_LEN, //
        },
        pdu::{
            Bhs,
            HEADERS_LEN, //
        },
        sizing::{
            self,
            ConnSizing, //
        },
    },
    rdma::{
        conn::{
            Connection,
            DmaBuf,
            RecvBuf, //
        },
        DeviceRef, //
    },
};
use core::num::NonZeroU32;
use kernel::num::casts::FromSafeCast;
use kernel::sync::atomic::Atomic;
use kernel::{
    alloc::{
        KBox,
        KVec, //
    },
    dma::DataDirection,
    new_spinlock_irq,
    prelude::*,
    sync::{
        Arc,
        Completion,
        SetOnce,
        SpinLockIrq, //
    },
};

/// The resources of a connected iSER connection. Dropping it (after the
/// revocation that stops every fast-path user) disconnects, drains and
/// destroys the QP first, then drops the task references (so the commands
/// complete as soon as the target can reach none of their memory: the PD
/// is the connection's own, so with its one QP gone no peer can use an
/// rkey of it) and completes `quiesced`, for which `IserConn::shut`
/// waits; then the fields drop: the MRs, the PD, the CQ and the CM id
/// (`conn`), then the buffers. Its locks are boxed, so that it needs no
/// pinning and may have that `Drop`.
pub(super) struct Res {
    /// By task slot: what its command still owes before it may complete,
    /// and the reference that holds it until then.
    pub(super) slots: KVec<Slot>,
    /// The rare PDUs' bookkeeping: control SENDs, the TMF and logout
    /// outstanding, a TMF Response held.
    pub(super) track: Pin<KBox<SpinLockIrq<Track>>>,
    /// A TMF Response is held in `track` (read by every completion
    /// without the lock: see `Res::events_done`).
    pub(super) tmf_held: Atomic<bool>,
    pub(super) conn: Connection<IserConn>,
    /// Completed by the drop once the QP is gone and the task references
    /// are dropped.
    quiesced: Arc<Completion>,
    /// The owning connection's address, which its tracepoint events carry.
    pub(super) trace_id: usize,
    /// The owning connection's counters.
    pub(super) counters: Arc<Counters>,
    pub(super) dev: DevUse,
    pub(super) sizing: ConnSizing,
    /// Buffers of control PDUs that carry data (login, text, NOP-Out with
    /// ping data), sent on tags `0..CTRL_TX`.
    pub(super) ctrl_tx: KVec<Arc<DmaBuf>>,
    /// One header buffer per task slot: command and control PDUs.
    pub(super) tx_hdrs: KVec<Arc<DmaBuf>>,
    /// Header buffers of unsolicited Data-Out PDUs, and which are free.
    pub(super) dataout: KVec<Arc<DmaBuf>>,
    pub(super) dataouts: DataOutPool,
    /// What each send tag carries.
    pub(super) tags: TagMap,
    /// How many full-feature receives (tags `1..=n`) were given their
    /// buffers; set once, before the last login request is sent.
    pub(super) ff_recvs: SetOnce<u32>,
    /// The full-feature receives were posted (once: a second full-feature
    /// Login Response is refused). Set by the receive path.
    pub(super) ff_posted: Atomic<bool>,
    /// The target may invalidate our rkeys with SEND_WITH_INV.
    pub(super) remote_inv: bool,
    /// Command SENDs whose PDU went inline: one in `signal_interval` is
    /// signaled (`proto::sizing::signal_interval`). Counted by
    /// `xmit_task` on any CPU; only its remainder matters.
    pub(super) inline_sends: Atomic<u32>,
    /// Non-zero by type: the remainder by it has no panic path.
    pub(super) signal_interval: NonZeroU32,
}

impl Drop for Res {
    fn drop(&mut self) {
        // Before any field: the task references in `slots` and `track` may
        // go only once the QP, the one way to the connection's PD, is gone
        // (drained: no work request outstanding, no completion to come).
        self.conn.destroy_qp();
        // Then every one of them, outside the lock (the last one frees its
        // task, which takes libiscsi's locks), before the slow frees.
        for s in self.slots.iter() {
            drop(s.teardown());
        }
        let mut at = 0;
        loop {
            let r = self.track.lock().take_ref(&mut at);
            match r {
                Some(r) => drop(r),
                None => break,
            }
        }
        self.quiesced.complete_all();
    }
}

/// The buffers of a connection, made before its QP.
pub(super) struct Bufs {
    pub(super) ctrl_tx: KVec<Arc<DmaBuf>>,
    /// Receive tag 0's buffer, for login responses: given to the
    /// connection once it is made.
    pub(super) login_rx: Option<RecvBuf>,
    pub(super) tx_hdrs: KVec<Arc<DmaBuf>>,
    pub(super) dataout: KVec<Arc<DmaBuf>>,
    pub(super) dataouts: DataOutPool,
    pub(super) tags: TagMap,
    pub(super) slots: KVec<Slot>,
    pub(super) track: Pin<KBox<SpinLockIrq<Track>>>,
}

impl Bufs {
    pub(super) fn new(dev: &DeviceRef, cmds: u32, n_dataout: u32) -> Result<Self> {
        let headers = |n: u32| -> Result<KVec<Arc<DmaBuf>>> {
            let mut v = KVec::with_capacity(usize::from_safe_cast(n), GFP_KERNEL)?;
            for _ in 0..n {
                v.push(
                    DmaBuf::new(dev, HEADERS_LEN, DataDirection::ToDevice)?,
                    GFP_KERNEL,
                )?;
            }
            Ok(v)
        };
        let tags = TagMap {
            cmds,
            dataouts: n_dataout,
        };
        let track = Track::new(tags.tag(SendTag::DataOut(n_dataout)))?;
        let mut slots = KVec::with_capacity(usize::from_safe_cast(cmds), GFP_KERNEL)?;
        for _ in 0..cmds {
            slots.push(Slot::new(), GFP_KERNEL)?;
        }
        let mut ctrl_tx = KVec::with_capacity(usize::from_safe_cast(CTRL_TX), GFP_KERNEL)?;
        for _ in 0..CTRL_TX {
            ctrl_tx.push(
                DmaBuf::new(dev, HEADERS_LEN + LOGIN_DATA, DataDirection::ToDevice)?,
                GFP_KERNEL,
            )?;
        }
        Ok(Self {
            ctrl_tx,
            login_rx: Some(RecvBuf::new(dev, HEADERS_LEN + LOGIN_DATA)?),
            tx_hdrs: headers(cmds)?,
            dataout: headers(n_dataout)?,
            dataouts: DataOutPool::new(n_dataout)?,
            tags,
            slots,
            track: KBox::pin_init(new_spinlock_irq!(track, "riser_track"), GFP_KERNEL)?,
        })
    }
}

impl Res {
    /// The resources of `ep`'s connection `conn`. The target may
    /// invalidate riser's keys (SEND_WITH_INV) when every command
    /// registers its memory (always_register).
    pub(super) fn new(
        ep: &IserConn,
        conn: Connection<IserConn>,
        dev: DevUse,
        sizing: ConnSizing,
        b: Bufs,
    ) -> Self {
        Res {
            conn,
            quiesced: ep.quiesced.clone(),
            trace_id: crate::trace::id(ep),
            counters: ep.counters.clone(),
            remote_inv: ep.params.always_register,
            dev,
            sizing,
            ctrl_tx: b.ctrl_tx,
            tx_hdrs: b.tx_hdrs,
            tags: b.tags,
            dataout: b.dataout,
            dataouts: b.dataouts,
            slots: b.slots,
            track: b.track,
            tmf_held: Atomic::new(false),
            ff_recvs: SetOnce::default(),
            ff_posted: Atomic::new(false),
            inline_sends: Atomic::new(0),
            signal_interval: NonZeroU32::new(sizing::signal_interval(sizing.max_cmds))
                .unwrap_or(NonZeroU32::MIN),
        }
    }
}

impl Res {
    /// The number of send tag `t`.
    pub(super) fn tag(&self, t: SendTag) -> u32 {
        self.tags.tag(t)
    }

    pub(super) fn headers(iser: IserHeader, bhs: &Bhs) -> Result<[u8; HEADERS_LEN]> {
        let mut h = [0u8; HEADERS_LEN];
        iser.encode(&mut h[..ISER_HDR_LEN]).map_err(|_| EINVAL)?;
        h[ISER_HDR_LEN..].copy_from_slice(bhs.bytes());
        Ok(h)
    }
}
