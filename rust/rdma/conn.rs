// SPDX-License-Identifier: GPL-2.0

//! A connected RDMA queue pair: its work request posting and completion
//! dispatch here, and in `conn/` the memory its work requests point to
//! (`dma`: DMA-mapped buffers and scatterlists; `mr`: fast-registration
//! memory regions; `wr`: scatter/gather entries, registrations, send
//! operations and completion tags; `cmd`: the command slots, whose work
//! requests are built once and posted through a claim).
//!
//! Lifetimes are structural: a [`Connection`] owns its CM id, QP, CQ, MRs
//! and completion tags, and destroys the QP before anything a work request
//! may name; a buffer given to a posted work request is kept alive by the
//! work request's tag until its completion (or the QP's destruction).

use super::{
    cm::{
        CmHandler,
        CmId,
        CmIdRef, //
    },
    device::DeviceRef,
    post_result,
    AsyncEvent,
    Cq,
    Device,
    Pd, //
};
use crate::{
    bindings,
    fault::{
        self,
        Site, //
    },
    kernel_ext::rcu::RcuRead,
    kernel_ext::slot::SlotDomain,
    kernel_ext::softirq::InSoftirq,
};
use core::{
    mem::MaybeUninit,
    ptr::NonNull,
    sync::atomic::Ordering, //
};
use kernel::num::casts::FromSafeCast;
use kernel::{
    alloc::KVec,
    dma::DataDirection,
    error::to_result,
    prelude::*,
    sync::{
        rcu,
        Arc,
        SetOnce, //
    },
    types::ForeignOwnable, //
};

mod cmd;
mod dma;
mod mr;
mod rx;
mod wr;

use cmd::CmdSlot;
pub(crate) use cmd::{
    CmdClaim,
    CmdPost,
    CmdSend, //
};
pub(crate) use dma::{
    BufRef,
    DmaBuf,
    DmaBufs,
    DmaSg,
    Sge, //
};
use mr::MrSlot;
pub(crate) use mr::Registration;
use rx::RecvSlot;
pub(crate) use rx::{
    QpHandler,
    Received,
    RecvBuf, //
};
use wr::Tag;
pub(crate) use wr::{
    Access,
    SendDone,
    SendOp,
    Wc,
    UNSIGNALED_TAG, //
};

/// The queue sizes and resources of a [`Connection`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ConnCaps {
    /// Send queue depth, including the slot `ib_drain_qp` needs.
    pub(crate) max_send_wr: u32,
    /// Receive queue depth, including the slot `ib_drain_qp` needs.
    pub(crate) max_recv_wr: u32,
    /// Receive tags (`0..recv_tags`).
    pub(crate) recv_tags: u32,
    /// Signaled send tags (`0..send_tags`).
    pub(crate) send_tags: u32,
    /// Fast-registration MRs (`0..mrs`) at most: made with the command
    /// slots ([`Connection::make_cmd_slots`]).
    pub(crate) mrs: u32,
    /// Pages each MR maps.
    pub(crate) pages_per_mr: u32,
    /// Bytes of inline data wanted per send (0: none). A provider that
    /// refuses them gets a QP without.
    pub(crate) max_inline: u32,
    /// Command slots (`0..cmd_slots`, at most `mrs`) at most: slot `i`
    /// registers MR `i` and sends on send tag `cmd_tag_base + i`.
    pub(crate) cmd_slots: u32,
    /// The send tag of command slot 0.
    pub(crate) cmd_tag_base: u32,
}

impl ConnCaps {
    /// Whether send tag `tag` is a command slot's (`cmd_tag_base +
    /// 0..cmd_slots`), which only a claim of the slot takes.
    pub(crate) fn is_cmd_tag(&self, tag: u32) -> bool {
        tag.checked_sub(self.cmd_tag_base)
            .is_some_and(|i| i < self.cmd_slots)
    }
}

/// What [`Connection::new`] makes before its QP: the receive slots (each
/// made later, with its buffer), the send tags and the unsignaled tag.
type Parts = (KVec<SetOnce<RecvSlot>>, KVec<Tag>, KBox<Tag>);

/// A connected (or connecting) RC queue pair with its CM id.
///
/// # Invariants
///
/// `qp` was created with `rdma_create_qp` on `id`, with `qp_context` equal to
/// `id`'s context (an `Arc<H>` owned by `id`); it is valid until
/// `qp_destroyed` is set, which [`Connection::destroy_qp`] (through `&mut`,
/// so with no other user) does when it destroys it, before the MRs, the CQ
/// and the id; nothing uses `qp` after that. Every tag, MR and command
/// slot is at a stable address (`KVec` never grown, `slots` set once)
/// until the QP is destroyed; command slot `i` names MR `i` and send tag
/// `tag` of its own.
pub(crate) struct Connection<H: CmHandler + QpHandler> {
    qp: NonNull<bindings::ib_qp>,
    qp_destroyed: bool,
    /// The receive slots, each made with its buffer
    /// ([`Connection::give_recv_buf`]).
    recv_tags: KVec<SetOnce<RecvSlot>>,
    send_tags: KVec<Tag>,
    unsignaled: KBox<Tag>,
    /// The command slots and their MRs, made once the session's size is
    /// known ([`Connection::make_cmd_slots`]).
    slots: SetOnce<CmdSlots<H::CmdData>>,
    caps: ConnCaps,
    /// Inline bytes per send the QP takes.
    max_inline: u32,
    pd: Arc<Pd>,
    _cq: Cq,
    id: CmId<H>,
}

/// A connection's command slots, each with the MR it registers (slot `i`
/// holds MR `i`): dropped with the connection, after its QP.
struct CmdSlots<D> {
    cmds: KVec<CmdSlot<D>>,
    /// The domain of the slot tokens that claim them.
    domain: SlotDomain,
}

/// The MRs of a connection's command slots, made ahead of
/// [`Connection::install_cmd_slots`] (in process context: allocating them
/// may sleep), with room for the slots, and the user's state of each slot
/// (`D`).
pub(crate) struct CmdSlotsMade<D> {
    pd: Arc<Pd>,
    mrs: KVec<MrSlot>,
    hdrs: KVec<DmaBuf>,
    data: KVec<D>,
    cmds: KVec<CmdSlot<D>>,
}

impl<D> CmdSlotsMade<D> {
    /// `n` MRs of `pages` pages each in `pd`, and `n` header buffers of
    /// `hdr_len` bytes each, on `align`-byte lines of their own, mapped on
    /// `dev` (`pd`'s device) for the slots' SENDs from a buffer, and the
    /// user's state of each slot, made by `data`. Process context.
    pub(crate) fn new(
        pd: &Arc<Pd>,
        dev: &DeviceRef,
        n: u32,
        pages: u32,
        hdr_len: usize,
        align: usize,
        mut data: impl FnMut() -> D,
    ) -> Result<Self> {
        if dev.raw() != pd.device_ptr() {
            return Err(EINVAL);
        }
        let mut mrs = KVec::with_capacity(usize::from_safe_cast(n), GFP_KERNEL)?;
        let mut datas = KVec::with_capacity(usize::from_safe_cast(n), GFP_KERNEL)?;
        for _ in 0..n {
            mrs.push(MrSlot::new(pd, pages)?, GFP_KERNEL)?;
            datas.push(data(), GFP_KERNEL)?;
        }
        let hdrs = DmaBuf::carve_into(
            dev,
            hdr_len,
            usize::from_safe_cast(n),
            align,
            DataDirection::ToDevice,
        )?;
        Ok(Self {
            pd: pd.clone(),
            mrs,
            hdrs,
            data: datas,
            cmds: KVec::with_capacity(usize::from_safe_cast(n), GFP_KERNEL)?,
        })
    }
}

impl<'a, D> SendDone<'a, D> {
    /// The command slot whose send tag this is, if it is one's (and known
    /// yet: `None` too for a completion that raced the slots'
    /// installation, which the tag number then names).
    #[inline(always)]
    pub(crate) fn cmd(&self) -> Option<CmdRef<'a, D>> {
        let p = NonNull::new(self.tag?.cmd.load(Ordering::Acquire))?;
        // SAFETY: A tag's command slot, once set, is a `CmdSlot<D>` alive
        // for `'a` (`SendDone`'s invariant).
        let slot = unsafe { p.cast::<CmdSlot<D>>().as_ref() };
        Some(CmdRef { slot })
    }
}

/// One command slot of a connection, found by its index, for the
/// completions: the user's state of it, and its MR's.
pub(crate) struct CmdRef<'a, D> {
    slot: &'a CmdSlot<D>,
}

impl<'a, D> CmdRef<'a, D> {
    /// The user's state of the slot.
    #[inline(always)]
    pub(crate) fn data(&self) -> &'a D {
        self.slot.data()
    }

    /// Records that the peer invalidated the slot's MR (SEND_WITH_INV
    /// naming its rkey).
    #[inline(always)]
    pub(crate) fn mr_invalidated(&self) {
        self.slot.mr().valid.store(false, Ordering::Release);
    }
}

// SAFETY: Posting is serialised by the provider; the command slots are set
// once (`SetOnce`); the tags and the MR states (`valid`, `reg_rkey`,
// `remote`) are atomics; an MR's own fields are written and read only by
// the holder of its command slot's claim (`CmdClaim`, which holds the
// slot's `SlotToken`: one at a time, each one's end ordered before the
// next's start), so by one CPU at a time, and so are a command slot's
// work requests; a receive slot's request is written only by the poster
// its gate admits, one at a time; the command slots' user state is
// `Send` and `Sync` (`QpHandler::CmdData`'s bounds); everything may be
// released from any thread.
unsafe impl<H: CmHandler + QpHandler> Send for Connection<H> {}
// SAFETY: As above.
unsafe impl<H: CmHandler + QpHandler> Sync for Connection<H> {}

impl<H: CmHandler + QpHandler> Connection<H> {
    /// Makes the QP on `id` (whose route is resolved), completing on `cq`,
    /// with the tags of `caps` (the command slots and MRs come later:
    /// [`Connection::make_cmd_slots`]). On failure the id is handed back, so
    /// a CM handler never drops (destroys) its own id.
    pub(crate) fn new(
        id: CmId<H>,
        pd: Arc<Pd>,
        cq: Cq,
        caps: ConnCaps,
    ) -> core::result::Result<Self, (CmId<H>, Error)> {
        let parts = match Self::parts(caps) {
            Ok(p) => p,
            Err(e) => return Err((id, e)),
        };
        let (recv_tags, send_tags, unsignaled) = parts;
        let attr_for = |max_inline_data: u32| bindings::ib_qp_init_attr {
            event_handler: Some(Self::qp_event_cb),
            qp_context: id.context(),
            send_cq: cq.as_raw(),
            recv_cq: cq.as_raw(),
            cap: bindings::ib_qp_cap {
                max_send_wr: caps.max_send_wr,
                max_recv_wr: caps.max_recv_wr,
                max_send_sge: 2,
                max_recv_sge: 1,
                max_inline_data,
                ..Default::default()
            },
            sq_sig_type: bindings::ib_sig_type_IB_SIGNAL_REQ_WR,
            qp_type: bindings::ib_qp_type_IB_QPT_RC,
            ..Default::default()
        };
        let mut attr = attr_for(caps.max_inline);
        // SAFETY: The id is valid and route-resolved; `pd` and `cq` are
        // valid; `attr` outlives the call.
        let mut created = unsafe { bindings::rdma_create_qp(id.as_raw(), pd.as_raw(), &mut attr) };
        if created != 0 && caps.max_inline > 0 {
            // A provider with less (or no) inline room refuses the QP: one
            // without inline data is what every provider makes.
            attr = attr_for(0);
            // SAFETY: As above; the failed call left no QP on the id.
            created = unsafe { bindings::rdma_create_qp(id.as_raw(), pd.as_raw(), &mut attr) };
        }
        if let Err(e) = to_result(created) {
            return Err((id, e));
        }
        // Providers report what they made in `cap`; a smaller request than
        // asked is never assumed larger.
        let max_inline = attr.cap.max_inline_data.min(caps.max_inline);
        // SAFETY: `rdma_create_qp` succeeded, so the id holds the new QP.
        let qp = unsafe { (*id.as_raw()).qp };
        let Some(qp) = NonNull::new(qp) else {
            return Err((id, ENOMEM));
        };
        // INVARIANT: created on `id` with `qp_context` = the id's context;
        // the field order drops the MRs, the PD, the CQ and the id after the
        // QP is destroyed in `drop`.
        Ok(Self {
            qp,
            qp_destroyed: false,
            recv_tags,
            send_tags,
            unsignaled,
            slots: SetOnce::default(),
            caps,
            max_inline,
            pd,
            _cq: cq,
            id,
        })
    }

    fn parts(caps: ConnCaps) -> Result<Parts> {
        // Each command slot's MR and send tag can exist.
        let tags_end = caps.cmd_tag_base.checked_add(caps.cmd_slots);
        if caps.cmd_slots > caps.mrs || tags_end.is_none_or(|e| e > caps.send_tags) {
            return Err(EINVAL);
        }
        let mut recv = KVec::with_capacity(usize::from_safe_cast(caps.recv_tags), GFP_KERNEL)?;
        for _ in 0..caps.recv_tags {
            recv.push(SetOnce::default(), GFP_KERNEL)?;
        }
        let mut send = KVec::with_capacity(usize::from_safe_cast(caps.send_tags), GFP_KERNEL)?;
        for i in 0..caps.send_tags {
            send.push(Tag::new(i, Self::send_done_cb), GFP_KERNEL)?;
        }
        let unsignaled = KBox::new(Tag::new(UNSIGNALED_TAG, Self::send_done_cb), GFP_KERNEL)?;
        Ok((recv, send, unsignaled))
    }

    /// The domain whose slot tokens claim the command slots, once they
    /// are installed.
    pub(crate) fn cmd_slots_domain(&self) -> Option<SlotDomain> {
        self.slots.as_ref().map(|s| s.domain)
    }

    /// How many command slots the connection may have, and the pages
    /// each one's MR must map: what [`CmdSlotsMade::new`] is given.
    pub(crate) fn cmd_slot_caps(&self) -> (u32, u32) {
        (self.caps.cmd_slots, self.caps.pages_per_mr)
    }

    /// Installs command slots `0..n` with the `n` MRs of `made`, claimed
    /// by the tokens of `domain` ([`Connection::claim_cmd`]), once:
    /// `EBUSY` after, `ENOTCONN` once the QP is gone, `EINVAL` for MRs of
    /// another PD or more slots than the connection was made for.
    /// Allocates nothing (the MRs were made ahead, outside any read-side
    /// section): a connection sized for the largest session installs only
    /// what its session can use.
    pub(crate) fn install_cmd_slots(
        &self,
        made: CmdSlotsMade<H::CmdData>,
        domain: SlotDomain,
    ) -> Result {
        if self.qp_destroyed {
            return Err(ENOTCONN);
        }
        let CmdSlotsMade {
            pd,
            mrs,
            hdrs,
            data,
            mut cmds,
        } = made;
        let n = mrs.len();
        if !Arc::ptr_eq(&pd, &self.pd)
            || n == 0
            || n > usize::from_safe_cast(self.caps.cmd_slots)
            || cmds.capacity() < n
            || hdrs.len() != n
            || data.len() != n
        {
            return Err(EINVAL);
        }
        if self.slots.as_ref().is_some() {
            return Err(EBUSY);
        }
        let unsig = (&raw const self.unsignaled.cqe).cast_mut();
        let lkey = self.pd.local_dma_lkey();
        let parts = mrs.into_iter().zip(hdrs).zip(data);
        for (i, ((mr, hdr), data)) in (0..self.caps.cmd_slots).zip(parts) {
            // `cmd_tag_base + cmd_slots` <= `send_tags` (checked in `parts`).
            let tag = self.caps.cmd_tag_base + i;
            let t = self
                .send_tags
                .get(usize::from_safe_cast(tag))
                .ok_or(EINVAL)?;
            // SAFETY: `t` is this connection's command tag `tag`, slot
            // `i`'s alone (the tags `cmd_tag_base..` are the slots', in
            // order); `send_tags` is never grown, and a slot's tag is
            // reached only through the connection, alive then.
            let slot = unsafe { CmdSlot::new(mr, hdr, t, unsig, lkey, data) };
            // Within the capacity checked above: nothing is allocated.
            cmds.push(slot, GFP_ATOMIC)?;
        }
        // At their place for good: the vector is never grown (moving it
        // into `slots` moves not its elements).
        cmds.iter_mut().for_each(CmdSlot::link);
        // Two callers at once: one set is kept, the other's dropped
        // unused (nothing posted names it).
        if !self.slots.populate(CmdSlots { cmds, domain }) {
            return Err(EBUSY);
        }
        // Each tag leads its completions to its slot from now on (one that
        // comes before finds none, and the tag's number names the slot).
        for c in self.slots.as_ref().into_iter().flat_map(|s| s.cmds.iter()) {
            // INVARIANT: the slot whose tag this is (its own), of this
            // connection's `CmdData`, at its place for good (installed
            // above) and alive while the connection is.
            c.tag()
                .cmd
                .store(core::ptr::from_ref(c).cast_mut().cast(), Ordering::Release);
        }
        Ok(())
    }

    /// MR `mr`'s slot (command slot `mr`'s), if made.
    #[inline(always)]
    fn mr(&self, mr: u32) -> Option<&MrSlot> {
        self.cmd(mr).map(CmdSlot::mr)
    }

    /// Command slot `idx`, if made.
    #[inline(always)]
    fn cmd(&self, idx: u32) -> Option<&CmdSlot<H::CmdData>> {
        self.slots.as_ref()?.cmds.get(usize::from_safe_cast(idx))
    }

    /// Command slot `idx`, if made, for its completions.
    #[inline(always)]
    pub(crate) fn cmd_ref(&self, idx: u32) -> Option<CmdRef<'_, H::CmdData>> {
        self.cmd(idx).map(|slot| CmdRef { slot })
    }

    /// The user's state of every command slot made.
    pub(crate) fn cmd_data(&self) -> impl Iterator<Item = &H::CmdData> {
        self.slots
            .as_ref()
            .into_iter()
            .flat_map(|s| s.cmds.iter().map(CmdSlot::data))
    }

    /// The CM id.
    pub(crate) fn cm(&self) -> &CmId<H> {
        &self.id
    }

    /// The port of `dev` the connection goes through, if it goes through
    /// `dev`.
    pub(crate) fn port_on(&self, dev: &Device) -> Option<u32> {
        // SAFETY: The id is valid while `self` is; its device and port are
        // set once its route resolved, before the QP was made, and do not
        // change.
        let (d, p) = unsafe {
            let id = self.id.as_raw();
            ((*id).device, (*id).port_num)
        };
        (d == dev.as_raw()).then_some(p)
    }

    /// The connection's source GID: for RoCE its source IP address as a
    /// GID, for InfiniBand and iWARP the port GID its address resolved to.
    pub(crate) fn source_gid(&self) -> [u8; 16] {
        let mut sgid = bindings::ib_gid::default();
        // SAFETY: The id is valid while `self` is; `rdma_read_gids` reads
        // its device, port and addresses, set once its route resolved
        // (before the QP was made) and not changed after; `sgid` is
        // writable and a null `dgid` is not written.
        unsafe { bindings::rdma_read_gids(self.id.as_raw(), &mut sgid, core::ptr::null_mut()) };
        // SAFETY: Every bit pattern of the GID union is a valid byte array.
        unsafe { *sgid.raw.as_ref() }
    }

    /// Bytes of inline data a send may carry ([`CmdSend::Inline`]); 0
    /// when the provider took none.
    pub(crate) fn max_inline(&self) -> u32 {
        self.max_inline
    }

    /// The PD the QP and MRs are in.
    pub(crate) fn pd(&self) -> &Arc<Pd> {
        &self.pd
    }

    /// Connects from inside the CM handler of this connection's id, with
    /// `private` as the CM private data.
    pub(crate) fn connect_in_handler(
        &self,
        ev: &CmIdRef,
        private: &[u8],
        responder_resources: u8,
        initiator_depth: u8,
    ) -> Result {
        // Only inside this id's running handler: the event's id must be
        // this one (another id's handler holds another id's mutex), and the
        // caller the task running its handler.
        if !core::ptr::eq(ev.as_raw(), self.cm().as_raw()) || !self.cm().in_own_handler() {
            return Err(EINVAL);
        }
        let mut param = bindings::rdma_conn_param {
            private_data: private.as_ptr().cast(),
            private_data_len: u8::try_from(private.len())?,
            responder_resources,
            initiator_depth,
            retry_count: 7,
            rnr_retry_count: 6,
            ..Default::default()
        };
        // The event's id is this id: its handler runs, holding the handler
        // mutex `rdma_connect_locked` needs.
        // SAFETY: The id is valid; `param` and `private` outlive the call.
        to_result(unsafe { bindings::rdma_connect_locked(self.cm().as_raw(), &mut param) })
    }

    /// Starts a disconnect; the QP moves to the error state and outstanding
    /// work requests flush. It may sleep (`rdma_disconnect` takes the id's
    /// locks and may wait): private, so that only [`Connection::destroy_qp`]
    /// calls it, which needs `&mut self` and runs in process context (the
    /// driver's disconnects from its CM handler go through
    /// [`CmIdRef::disconnect`], which only a handler has).
    fn disconnect(&self) {
        // SAFETY: The id is valid (type invariant); a failure means it was
        // not connected, which is fine to ignore.
        let _ = unsafe { bindings::rdma_disconnect(self.cm().as_raw()) };
    }

    /// Waits until every posted work request has completed (flushed). Must
    /// run in process context, after [`Connection::disconnect`].
    fn drain(&self) {
        if self.qp_destroyed {
            return;
        }
        // SAFETY: The QP is valid (type invariant: not destroyed); its CQ is
        // not polled directly, as `ib_drain_qp` requires.
        unsafe { bindings::ib_drain_qp(self.qp.as_ptr()) };
    }

    /// Disconnects, drains and destroys the QP, then releases what its
    /// work requests held; once (later calls do nothing). Receives are
    /// refused from the start (`post_recv`, and reposts from completion
    /// handlers: `ENOTCONN`). After it, no
    /// work request of the connection is outstanding, posting fails
    /// (`ENOTCONN`), and no peer can reach the MRs through this QP; the
    /// MRs, the PD, the CQ and the CM id stay until the connection drops.
    /// Process context.
    pub(crate) fn destroy_qp(&mut self) {
        if self.qp_destroyed {
            return;
        }
        // A completion handler may repost a receive (`Received`) with no
        // `&self`: closed first, and past a grace period every such post
        // has either gone (before the drain's marker) or will be refused.
        self.recv_slots().for_each(RecvSlot::close);
        rcu::synchronize_rcu();
        // Flush and wait for every outstanding work request, so no
        // completion names a tag, buffer or MR released or freed after.
        self.disconnect();
        self.drain();
        // SAFETY: The QP was created on this id (type invariant) and is
        // destroyed once: the flag is set below, and `&mut self` means no
        // other user of the QP.
        unsafe { bindings::rdma_destroy_qp(self.id.as_raw()) };
        // INVARIANT: the QP is gone; nothing uses `qp` from here.
        self.qp_destroyed = true;
        self.recv_slots().for_each(RecvSlot::reset);
        self.send_tags.iter().for_each(Tag::release);
    }

    /// Whether send tag `tag` is free for a new work request: its last one
    /// has completed, or none was posted. A stale answer is harmless: a
    /// tag taken meanwhile makes [`Connection::post_send`] fail with
    /// `EBUSY` before anything is posted.
    pub(crate) fn send_tag_idle(&self, tag: u32) -> bool {
        self.send_tags
            .get(usize::from_safe_cast(tag))
            .is_some_and(Tag::idle)
    }

    /// How many work requests were posted (or refused after taking the
    /// tag) on send tag `tag` so far, wrapping: a request posted next will
    /// be number `send_tag_posts(tag) + 1`, which its [`SendDone::post`]
    /// says.
    pub(crate) fn send_tag_posts(&self, tag: u32) -> Option<u32> {
        self.send_tags
            .get(usize::from_safe_cast(tag))
            .map(|t| t.posts.load(Ordering::Acquire))
    }

    /// The receive slots made so far.
    fn recv_slots(&self) -> impl Iterator<Item = &RecvSlot> {
        self.recv_tags.iter().filter_map(SetOnce::as_ref)
    }

    /// Makes receive tag `tag`'s slot with its buffer, which it keeps for
    /// the connection's life; once per tag (`EBUSY` after), while the QP
    /// exists (`ENOTCONN` after). The buffer must be mapped on the
    /// connection's device.
    pub(crate) fn give_recv_buf(&self, tag: u32, buf: RecvBuf) -> Result {
        // A slot made after `destroy_qp` would not be closed; none is.
        if self.qp_destroyed {
            return Err(ENOTCONN);
        }
        let t = self
            .recv_tags
            .get(usize::from_safe_cast(tag))
            .ok_or(EINVAL)?;
        // Its receives name it with the PD's lkey, on this device (and
        // its length as a u32: `RecvSlot::new` refuses a longer one).
        if buf.device_ptr() != self.pd.device_ptr() {
            return Err(EINVAL);
        }
        let slot = RecvSlot::new(tag, Self::recv_done_cb, buf, self.pd.local_dma_lkey())?;
        // Two callers at once: one slot is kept, the other's dropped
        // unused (nothing was posted to it).
        if t.populate(slot) {
            Ok(())
        } else {
            Err(EBUSY)
        }
    }

    /// Posts a receive of tag `tag`'s buffer (all of it), completing on the
    /// tag. A tag whose last receive is being read ([`Received`]) is
    /// posted once that read ends. `EBUSY` if its receive is posted (or
    /// its repost already asked for), `EINVAL` if it has no buffer.
    pub(crate) fn post_recv(&self, tag: u32) -> Result {
        if self.qp_destroyed {
            return Err(ENOTCONN);
        }
        let t = self
            .recv_tags
            .get(usize::from_safe_cast(tag))
            .and_then(SetOnce::as_ref)
            .ok_or(EINVAL)?;
        // SAFETY: The QP is valid (not destroyed: checked on entry, and
        // `destroy_qp` needs `&mut self`); the tag's completions reach
        // this connection's handler.
        unsafe { t.post(self.qp.as_ptr()) }
    }

    /// Posts `op`, the rare requests (control PDUs, Data-Outs, a command's
    /// own LOCAL_INV); commands go through their slot ([`CmdClaim`]). An
    /// invalidation's MR state is published before posting, so a
    /// completion racing the post sees it, and rolled back if the provider
    /// refuses the request.
    ///
    /// The memory the request names is borrowed only for the call; what
    /// keeps it alive until its completion is said at [`SendOp`].
    #[inline(never)]
    pub(crate) fn post_send(&self, op: SendOp<'_>) -> Result {
        if self.qp_destroyed {
            return Err(ENOTCONN);
        }
        // Fault injection: the provider refuses the request.
        if fault::hit(Site::PostSend) {
            return Err(EIO);
        }
        let mut wr = bindings::ib_send_wr::default();
        // Written before the request names them: the provider reads only
        // the `num_sge` entries it has.
        let mut sges = [const { MaybeUninit::<bindings::ib_sge>::uninit() }; 2];
        let mut inv_before = None;
        let tag = match op {
            SendOp::LocalInv { mr, rkey, tag } => {
                let s = self.mr(mr).ok_or(EINVAL)?;
                // Only the key of the MR's last posted registration: a key
                // whose REG_MR is not posted yet would be invalidated
                // before it is registered, and then registered valid.
                if s.reg_rkey.load(Ordering::Acquire) != rkey {
                    return Err(EINVAL);
                }
                let t = match tag {
                    Some(t) => {
                        let t = self.shared_tag(t)?;
                        t.hold(None)?;
                        // CAST: the flag fits an int.
                        wr.send_flags = bindings::ib_send_flags_IB_SEND_SIGNALED as c_int;
                        Some(t)
                    }
                    None => None,
                };
                inv_before = Some((s, s.valid.swap(false, Ordering::AcqRel)));
                wr.opcode = bindings::ib_wr_opcode_IB_WR_LOCAL_INV;
                // SAFETY: Writing a union member.
                unsafe { *wr.ex.invalidate_rkey.as_mut() = rkey };
                t
            }
            SendOp::Send {
                tag,
                sges: list,
                keep,
            } => {
                let t = self.shared_tag(tag)?;
                if list.is_empty() || list.len() > 2 {
                    return Err(EINVAL);
                }
                // The tag keeps only `keep` alive until the completion.
                let kept = |b: &DmaBuf| keep.is_some_and(|k| core::ptr::eq(k.buf(), b));
                // Memory this device may read, and nothing else.
                let dev = self.pd.device_ptr();
                if !list
                    .iter()
                    .all(|s| s.buf.is_none_or(kept) && s.dev == dev && s.to_device)
                {
                    return Err(EINVAL);
                }
                for (slot, s) in sges.iter_mut().zip(list) {
                    slot.write(s.raw());
                }
                t.hold(keep)?;
                wr.opcode = bindings::ib_wr_opcode_IB_WR_SEND;
                wr.sg_list = sges.as_mut_ptr().cast();
                // CAST: one or two entries.
                wr.num_sge = list.len() as c_int;
                // CAST: the flag fits an int.
                wr.send_flags = bindings::ib_send_flags_IB_SEND_SIGNALED as c_int;
                Some(t)
            }
            SendOp::Marker { tag } => {
                let t = self.shared_tag(tag)?;
                t.hold(None)?;
                // No entries: `sg_list` stays null, `num_sge` 0.
                wr.opcode = bindings::ib_wr_opcode_IB_WR_SEND;
                // CAST: the flag fits an int.
                wr.send_flags = bindings::ib_send_flags_IB_SEND_SIGNALED as c_int;
                Some(t)
            }
        };
        let cqe = match tag {
            Some(t) => (&raw const t.cqe).cast_mut(),
            None => (&raw const self.unsignaled.cqe).cast_mut(),
        };
        // SAFETY: Writing the `wr_cqe` member of the union.
        unsafe { *wr.__bindgen_anon_1.wr_cqe.as_mut() = cqe };
        let mut bad = core::ptr::null();
        // Providers copy work requests when posting; buffers are held by
        // their tags until completion.
        // SAFETY: The QP is valid (not destroyed: checked on entry, and
        // `destroy_qp` needs `&mut self`); the request and the MR it names
        // outlive the call; its `num_sge` entries of `sges` were written
        // above.
        let r = post_result(unsafe { super::ib_post_send(self.qp.as_ptr(), &wr, &mut bad) });
        if r.is_err() {
            Self::not_taken(tag, inv_before);
        }
        r
    }

    /// Send tag `tag` for [`Connection::post_send`]: any tag but a command
    /// slot's (`EINVAL`), which only a claim of its slot takes
    /// ([`Tag::hold_claimed`]).
    fn shared_tag(&self, tag: u32) -> Result<&Tag> {
        if self.caps.is_cmd_tag(tag) {
            return Err(EINVAL);
        }
        self.send_tags.get(usize::from_safe_cast(tag)).ok_or(EINVAL)
    }

    /// Undoes what a request the provider refused held: its tag, and the
    /// MR state an invalidation changed.
    #[cold]
    fn not_taken(tag: Option<&Tag>, inv_before: Option<(&MrSlot, bool)>) {
        if let Some((s, valid)) = inv_before {
            s.valid.store(valid, Ordering::Release);
        }
        if let Some(t) = tag {
            t.release();
        }
    }

    /// A receive's completion, with the rkey the peer invalidated by it
    /// (Send with Invalidate), if any.
    fn recv_wc(wc: &bindings::ib_wc) -> Wc {
        // CAST: the flag fits an int.
        let inv = wc.wc_flags & (bindings::ib_wc_flags_IB_WC_WITH_INVALIDATE as c_int) != 0;
        Wc {
            status: wc.status,
            byte_len: wc.byte_len,
            // SAFETY: `invalidate_rkey` is the union's member when the flag
            // is set.
            invalidated: inv.then(|| unsafe { *wc.ex.invalidate_rkey.as_ref() }),
        }
    }

    /// A send's completion: no rkey is invalidated by a send (only a
    /// receive reports one, `IB_WC_WITH_INVALIDATE`), so none is read.
    fn send_wc(wc: &bindings::ib_wc) -> Wc {
        Wc {
            status: wc.status,
            byte_len: wc.byte_len,
            invalidated: None,
        }
    }

    /// # Safety
    ///
    /// Called by the provider with an asynchronous event of this
    /// connection's QP and its `qp_context`.
    unsafe extern "C" fn qp_event_cb(ev: *mut bindings::ib_event, ctx: *mut c_void) {
        // The QP's context is the `Arc<H>` the id owns, alive until the QP
        // is gone; events stop when it is destroyed.
        // SAFETY: The provider passes a valid event and the QP's context.
        let (ev, h) = unsafe { (AsyncEvent::from_raw(ev), Arc::<H>::borrow(ctx)) };
        h.qp_event(ev);
    }

    /// # Safety
    ///
    /// Called by ib_core's CQ polling with a completion of a receive posted
    /// by [`Connection::post_recv`].
    unsafe extern "C" fn recv_done_cb(_cq: *mut bindings::ib_cq, wc: *mut bindings::ib_wc) {
        // `wr_cqe` is the first field of one of this connection's
        // `RecvSlot`s; the QP's context is the `Arc<H>` the id owns, alive
        // until the QP is gone, which is after its completions are handled.
        // SAFETY: ib_core passes a valid completion of this connection's QP.
        let (slot, qp, w) = unsafe {
            let wc = &*wc;
            let slot = &*(*wc.__bindgen_anon_1.wr_cqe.as_ref()).cast::<RecvSlot>();
            (slot, wc.qp, Self::recv_wc(wc))
        };
        // Checked before anything is read through it.
        let Some(qp) = NonNull::new(qp) else {
            return;
        };
        // SAFETY: As above: the QP is this connection's, its context the
        // `Arc<H>` its id owns.
        let h = unsafe { Arc::<H>::borrow((*qp.as_ptr()).qp_context) };
        let h: &H = &h;
        // SAFETY: A connection's CQ is polled in softirq (`PollContext`
        // has no other kind), so ib_core runs this callback from its
        // irq_poll softirq handler; the value is this frame's, lent out by
        // reference (in `rx`, which goes with the handler), and gone when
        // the callback returns.
        let softirq = unsafe { InSoftirq::new() };
        // The handler's read section, all of it (bottom halves are off):
        // its reposts go inside (`RecvSlot::close`).
        let rcu = RcuRead::of_softirq(&softirq);
        // SAFETY: The slot's receive completed with `w` on `qp`, valid while
        // its completion is handled; one completion per posted receive, so
        // no other `Received` of the slot lives.
        let rx = unsafe { Received::new(slot, qp, h, rcu, Some(&softirq), w) };
        h.recv_done(rx);
    }

    /// # Safety
    ///
    /// Called by ib_core's CQ polling with a completion of a send posted by
    /// [`Connection::post_send`].
    unsafe extern "C" fn send_done_cb(_cq: *mut bindings::ib_cq, wc: *mut bindings::ib_wc) {
        // SAFETY: ib_core passes a valid completion of this connection's
        // QP; `wr_cqe` is one of this connection's `Tag`s.
        let (tag, qp, w) = unsafe {
            let wc = &*wc;
            let tag = &*(*wc.__bindgen_anon_1.wr_cqe.as_ref()).cast::<Tag>();
            (tag, wc.qp, Self::send_wc(wc))
        };
        // The tag is released by the handler (or when `SendDone` drops),
        // after it took what it kept for this request: released before, a
        // new request on the tag could have its bookkeeping taken by this
        // completion.
        // SAFETY: ib_core reports each posted request's completion once;
        // this is the completion of the request `tag` was held for. The
        // tag is this connection's, whose command slot, if set, is one of
        // its `CmdSlot<H::CmdData>`s, alive while the completion is handled
        // (the slots go after the QP).
        let done = unsafe { SendDone::<H::CmdData>::new(tag) };
        // Checked before anything is read through it, as in
        // `recv_done_cb`: with no QP there is no handler to tell, and the
        // tag goes back as `done` drops.
        let Some(qp) = NonNull::new(qp) else {
            return;
        };
        // SAFETY: The QP is this connection's, its context the `Arc<H>`
        // its id owns, alive until the QP is gone, which is after its
        // completions are handled.
        let h = unsafe { Arc::<H>::borrow((*qp.as_ptr()).qp_context) };
        // SAFETY: As in `recv_done_cb`: ib_core runs this callback from
        // its irq_poll softirq handler; the value is this frame's, lent
        // out by reference only for the handler's call.
        let softirq = unsafe { InSoftirq::new() };
        h.send_done(done, w, RcuRead::of_softirq(&softirq));
    }
}

impl<H: CmHandler + QpHandler> Drop for Connection<H> {
    fn drop(&mut self) {
        // The QP first (if the owner did not already); the fields (MRs,
        // PD, CQ, id) drop after this.
        self.destroy_qp();
    }
}
