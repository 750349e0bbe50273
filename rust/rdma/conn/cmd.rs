// SPDX-License-Identifier: GPL-2.0

//! Command slots: the work requests of one slot's command (the LOCAL_INV
//! and REG_MR of the slot's MR, the SEND of its PDU), built and checked
//! once when the connection is made, so that posting a command only fills
//! in keys, lengths and flags. A slot is used through a [`CmdClaim`],
//! which holds the slot's MR (two CPUs never fill in one slot's requests
//! at once) and, for a SEND from a buffer, the slot's send tag: a slot
//! whose last such SEND is outstanding is neither mapped anew nor sends
//! another until that completes.

use super::{
    dma::{
        DmaBuf,
        DmaSg,
        Sge, //
    },
    mr::{
        MrSlot,
        Registration, //
    },
    rx::QpHandler,
    wr::{
        Access,
        Tag, //
    },
    Connection, //
};
use crate::{
    bindings,
    fault::{
        self,
        Site, //
    },
    kernel_ext::slot::SlotToken,
    rdma::{
        cm::CmHandler,
        ib_post_send,
        post_result, //
    },
};
use core::{
    cell::{
        Cell,
        UnsafeCell, //
    },
    ptr::{
        null_mut,
        NonNull, //
    },
    sync::atomic::Ordering, //
};
use kernel::num::casts::FromSafeCast;
use kernel::prelude::*;

/// The work requests of one command slot, linked once: `inv` -> `reg`
/// -> `send`; a post starts the chain where its command needs it.
#[repr(C)]
struct Wrs {
    inv: bindings::ib_send_wr,
    reg: bindings::ib_reg_wr,
    send: bindings::ib_send_wr,
    sge: [bindings::ib_sge; 2],
}

/// One command slot of a [`Connection`]: slot `i` registers its MR (the
/// connection's MR `i`) and sends on its send tag `tag`.
///
/// # Invariants
///
/// `wrs` is at a stable address (the slots' `KVec` is never grown) and
/// links to itself: `inv.next` is `&reg.wr`, `reg.wr.next` is `&send`,
/// `send.sg_list` is `sge`; `reg.mr` is the slot's `mr`, the
/// CQEs are the connection's tags; `sge[0].lkey` is the local DMA key of
/// the connection's PD. `tag` points to one of the
/// connection's send tags (in its `send_tags`, never grown), the slot's
/// alone: valid whenever the slot is reached through its connection. It is read and written only by the
/// holder of the slot's claim (a [`CmdClaim`], one at a time). `hdr` is mapped on
/// the connection's device for it to read; it is the slot's alone (no
/// other value names it), written only by a [`CmdClaim`] of the slot
/// while it holds the slot's send tag, and read by the device only
/// through a SEND posted by such a claim, which hands the tag to its
/// completion: so no two writes, and no write and device read, overlap.
pub(super) struct CmdSlot<D> {
    wrs: UnsafeCell<Wrs>,
    mr: MrSlot,
    tag: NonNull<Tag>,
    hdr: DmaBuf,
    /// The user's own state of the slot (the handler's `CmdData`).
    data: D,
}

impl<D> CmdSlot<D> {
    /// The slot of MR `mr` (in the connection's PD), sending from header
    /// buffer `hdr` (mapped on the connection's device, for it to read) on
    /// tag `tag`, its unsignaled requests on `unsig`, with the user's
    /// state `data`. Linked by [`CmdSlot::link`] once it is at its place.
    ///
    /// # Safety
    ///
    /// `tag` is one of the connection's send tags, valid whenever the slot
    /// is reached through the connection, and no other command slot's.
    pub(super) unsafe fn new(
        mr: MrSlot,
        hdr: DmaBuf,
        tag: &Tag,
        unsig: *mut bindings::ib_cqe,
        lkey: u32,
        data: D,
    ) -> Self {
        let tag_cqe = (&raw const tag.cqe).cast_mut();
        let mut w = Wrs {
            inv: Default::default(),
            reg: Default::default(),
            send: Default::default(),
            sge: Default::default(),
        };
        w.inv.opcode = bindings::ib_wr_opcode_IB_WR_LOCAL_INV;
        w.reg.wr.opcode = bindings::ib_wr_opcode_IB_WR_REG_MR;
        w.reg.mr = mr.mr.as_raw();
        w.send.opcode = bindings::ib_wr_opcode_IB_WR_SEND;
        // Every SEND's first entry (its headers, inline or from the slot's
        // buffer) is in local memory: the key is set once.
        w.sge[0].lkey = lkey;
        // SAFETY: Writing the `wr_cqe` members of the unions.
        unsafe {
            *w.inv.__bindgen_anon_1.wr_cqe.as_mut() = unsig;
            *w.reg.wr.__bindgen_anon_1.wr_cqe.as_mut() = unsig;
            *w.send.__bindgen_anon_1.wr_cqe.as_mut() = tag_cqe;
        }
        // INVARIANT: `tag` is a send tag of the connection that outlives
        // the slot, the slot's alone (function contract).
        Self {
            wrs: UnsafeCell::new(w),
            mr,
            tag: NonNull::from(tag),
            hdr,
            data,
        }
    }

    /// The slot's MR.
    #[inline(always)]
    pub(super) fn mr(&self) -> &MrSlot {
        &self.mr
    }

    /// The user's state of the slot.
    #[inline(always)]
    pub(super) fn data(&self) -> &D {
        &self.data
    }

    /// The slot's send tag.
    pub(super) fn tag(&self) -> &Tag {
        // SAFETY: The slot's tag is one of its connection's send tags,
        // valid whenever the slot is reached through the connection (type
        // invariant), as it is to call this.
        unsafe { self.tag.as_ref() }
    }

    /// Links the slot's requests to each other, at the address where they
    /// stay.
    pub(super) fn link(&mut self) {
        let w = self.wrs.get_mut();
        w.inv.next = &raw mut w.reg.wr;
        w.reg.wr.next = &raw mut w.send;
        w.send.sg_list = w.sge.as_mut_ptr();
    }
}

/// How a command's PDU is sent.
pub(crate) enum CmdSend<'a> {
    /// Inline: the provider copies `bytes` while posting, so no tag is
    /// taken. Signaled if `signaled` (for the send queue's sake), on the
    /// connection's entry for unsignaled requests: either way no
    /// completion reports it unless it fails.
    Inline {
        /// The iSER header and BHS.
        bytes: &'a [u8],
        /// Whether the SEND is signaled.
        signaled: bool,
    },
    /// From the slot's header buffer, into which `hdr` is copied, followed
    /// by `data` (immediate data); signaled on the slot's tag, which stays
    /// taken until the completion.
    Buffered {
        /// The iSER header and BHS.
        hdr: &'a [u8],
        /// The immediate data, if any: memory of the command's mapping.
        data: Option<&'a Sge<'a>>,
    },
}

/// A command to post on a claimed slot.
pub(crate) struct CmdPost<'a> {
    /// The registration of the slot's MR, mapped by this claim
    /// ([`CmdClaim::map`]), and what the peer may do with it. When the
    /// MR's last registration is still valid, it is invalidated first, in
    /// the same chain.
    pub(crate) reg: Option<(&'a Registration<'a>, Access)>,
    /// The PDU.
    pub(crate) send: CmdSend<'a>,
}

/// A command post the provider refused, in whole or in part.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CmdRefused {
    /// Why.
    pub(crate) err: Error,
    /// Whether the registration went out (then it stays valid, with the
    /// access it gave, until it is invalidated).
    pub(crate) reg_posted: bool,
}

impl CmdRefused {
    /// Refused before anything was posted.
    fn before(err: Error) -> Self {
        Self {
            err,
            reg_posted: false,
        }
    }
}

/// The exclusive use of one command slot, taken with
/// [`Connection::claim_cmd`] from the slot's token (a [`SlotToken`] of
/// the connection's slot domain, which it holds: no two claims of one
/// slot live at once, and each one's end is ordered before the next's
/// start, with no atomic of the slot's own): its MR (mapped only through this claim, and
/// only once the slot's last SEND from a buffer completed). One command
/// is posted through it ([`CmdClaim::post`]); a SEND from a buffer takes
/// the slot's send tag (refused while its last one has not completed) and
/// keeps it until its completion. An inline SEND needs none: the provider
/// copies it while posting, and its completion is reported only if it
/// fails. What is held is given back when the claim drops.
///
/// # Invariants
///
/// `token` is slot `idx`'s of the domain `conn`'s command slots were
/// installed for, and `slot` is command slot `idx` of `conn`; `tag` is
/// `slot`'s send tag; while `tag_held` is set, this value holds it.
pub(crate) struct CmdClaim<'a, H: CmHandler + QpHandler> {
    conn: &'a Connection<H>,
    idx: u32,
    slot: &'a CmdSlot<H::CmdData>,
    _token: SlotToken<'a>,
    tag: &'a Tag,
    tag_held: Cell<bool>,
    mapped: Cell<bool>,
    posted: Cell<bool>,
}

impl<H: CmHandler + QpHandler> Connection<H> {
    /// Claims the command slot of `token` (its index): `EINVAL` for a
    /// token of another domain than the slots were installed for, or
    /// beyond the slots. The slot's send tag is taken by the post of a
    /// SEND from a buffer ([`CmdClaim::post`]).
    #[inline(always)]
    pub(crate) fn claim_cmd<'a>(&'a self, token: SlotToken<'a>) -> Result<CmdClaim<'a, H>> {
        let slots = self.slots.as_ref().ok_or(EINVAL)?;
        if token.domain() != slots.domain {
            return Err(EINVAL);
        }
        let idx = token.index();
        let slot = slots.cmds.get(usize::from_safe_cast(idx)).ok_or(EINVAL)?;
        // SAFETY: The slot's tag is one of this connection's send tags
        // (type invariant of `CmdSlot`), alive as the connection is.
        let tag = unsafe { slot.tag.as_ref() };
        // INVARIANT: the token is the slot's (its index, the slots'
        // domain); no tag yet.
        Ok(CmdClaim {
            conn: self,
            idx,
            slot,
            _token: token,
            tag,
            tag_held: Cell::new(false),
            mapped: Cell::new(false),
            posted: Cell::new(false),
        })
    }
}

impl<'a, H: CmHandler + QpHandler> CmdClaim<'a, H> {
    /// The slot claimed: while this value lives, no other claim of it
    /// does.
    pub(crate) fn index(&self) -> u32 {
        self.idx
    }

    /// The user's state of the slot claimed.
    #[inline(always)]
    pub(crate) fn data(&self) -> &'a H::CmdData {
        self.slot.data()
    }

    /// Maps `sg` into the slot's MR with a fresh key (`MrSlot::map`);
    /// once per claim (`EBUSY` after), so the MR is not
    /// mapped again while the registration lives. `EBUSY` too while the
    /// slot's last SEND from a buffer (which may read through the MR) has
    /// not completed.
    #[inline(always)]
    pub(crate) fn map<'s>(&'s self, sg: &'s DmaSg) -> Result<Registration<'s>> {
        // (Mapped before the post: the tag is not this claim's yet.)
        if self.mapped.replace(true) || !self.tag.idle() {
            return Err(EBUSY);
        }
        // SAFETY: This claim is the slot's only one (it holds the slot's
        // token), and maps the MR once: nothing else maps it while the
        // registration lives.
        unsafe { self.slot.mr.map(sg) }
    }

    /// Posts the command `p`, once (`EBUSY` after). On error, says whether
    /// the registration went out.
    #[inline(always)]
    pub(crate) fn post(&self, p: &CmdPost<'_>) -> core::result::Result<(), CmdRefused> {
        if self.posted.replace(true) {
            return Err(CmdRefused::before(EBUSY));
        }
        let conn = self.conn;
        if conn.qp_destroyed {
            return Err(CmdRefused::before(ENOTCONN));
        }
        // SAFETY: Only the holder of the slot's claim (this value, which
        // posts once) reaches the requests (type invariant of `CmdSlot`).
        let w = unsafe { &mut *self.slot.wrs.get() };
        let tagged = self.fill_send(w, &p.send).map_err(CmdRefused::before)?;
        // With a registration, the MR's state before the chain, restored
        // for what is not posted (read only then: a command without one
        // leaves the MR alone).
        let (first, inv, was) = match &p.reg {
            Some((reg, access)) => {
                let s = &self.slot.mr;
                let was = (
                    s.valid.load(Ordering::Acquire),
                    s.reg_rkey.load(Ordering::Acquire),
                    s.remote.load(Ordering::Acquire),
                );
                let (first, inv) = self.fill_reg(w, reg, *access, was)?;
                (first, inv, was)
            }
            None => (&raw const w.send, false, (false, 0, false)),
        };
        // Fault injection: the provider refuses the chain's last request
        // (the SEND), so that a chain of several goes out in part.
        let refuse_send = fault::hit(Site::PostSend);
        if refuse_send {
            if p.reg.is_none() {
                return Err(CmdRefused::before(EIO));
            }
            w.reg.wr.next = null_mut();
        }
        let mut bad = core::ptr::null();
        // SAFETY: The QP is valid (not destroyed: checked above, and
        // `destroy_qp` needs `&mut` of the connection this claim
        // borrows); the chain's requests, the inline bytes, the header
        // buffer (the slot's, kept by the connection) and the MR outlive
        // the call; providers copy work requests, and inline data, when
        // posting. Each request's `num_sge` entries were written by
        // `fill_send` and `fill_reg`.
        let r = post_result(unsafe { ib_post_send(conn.qp.as_ptr(), first, &mut bad) });
        if refuse_send {
            w.reg.wr.next = &raw mut w.send;
        }
        if r.is_ok() && !refuse_send {
            if tagged {
                // The completion releases the tag.
                self.tag_held.set(false);
            }
            return Ok(());
        }
        Err(self.refused(w, r.err(), bad, p.reg.is_some(), inv, was))
    }

    /// Fills in the slot's SEND for `send`, taking the slot's tag if it is
    /// sent from a buffer (`EBUSY` while the slot's last such SEND has not
    /// completed); says whether it took it. An inline SEND reads nothing
    /// after the post, so it needs no tag: signaled (for the send queue's
    /// sake), its completion comes on the connection's entry for
    /// unsignaled requests, which reports only failures.
    #[inline(always)]
    fn fill_send(&self, w: &mut Wrs, send: &CmdSend<'_>) -> Result<bool> {
        let conn = self.conn;
        let tagged = matches!(send, CmdSend::Buffered { .. });
        // `post` runs once per claim: the tag is not held yet.
        if tagged {
            // SAFETY: A command slot's tag is taken only here, by the
            // holder of the slot's claim (this value: no other claim of
            // the slot lives), once per claim (`post` runs once);
            // `post_send` refuses command slots' tags.
            unsafe { self.tag.hold_claimed()? };
            // INVARIANT: taken just above; given back when the claim
            // drops, unless the post hands it to the completion.
            self.tag_held.set(true);
        }
        match send {
            CmdSend::Inline { bytes, signaled } => {
                if bytes.is_empty() || bytes.len() > usize::from_safe_cast(conn.max_inline) {
                    return Err(EINVAL);
                }
                // Inline data is named by its kernel virtual address,
                // which the provider copies from while posting (the key,
                // the PD's local one, is set with the slot).
                w.sge[0].addr = u64::from_safe_cast(bytes.as_ptr().addr());
                // CAST: at most `max_inline` bytes, a u32.
                w.sge[0].length = bytes.len() as u32;
                w.send.num_sge = 1;
                let mut flags = bindings::ib_send_flags_IB_SEND_INLINE;
                if *signaled {
                    flags |= bindings::ib_send_flags_IB_SEND_SIGNALED;
                }
                // CAST: the flags fit an int.
                w.send.send_flags = flags as c_int;
            }
            CmdSend::Buffered { hdr, data } => {
                let buf = &self.slot.hdr;
                // SAFETY: The buffer is the slot's alone, and this claim
                // holds the slot's tag (taken above): no other claim writes
                // it, and no SEND that reads it is outstanding (type
                // invariant of `CmdSlot`).
                unsafe { buf.write_exclusive(0, hdr)? };
                // The buffer is mapped on the PD's device: its local key
                // (set with the slot) covers it.
                w.sge[0].addr = buf.addr;
                // CAST: no longer than the buffer, checked by `write`.
                w.sge[0].length = hdr.len() as u32;
                w.send.num_sge = 1;
                if let Some(d) = data {
                    // Memory this device may read, and not a buffer (which
                    // the tag would have to keep).
                    if d.dev != conn.pd.device_ptr() || !d.to_device || d.buf.is_some() {
                        return Err(EINVAL);
                    }
                    w.sge[1] = d.raw();
                    w.send.num_sge = 2;
                }
                // CAST: the flag fits an int.
                w.send.send_flags = bindings::ib_send_flags_IB_SEND_SIGNALED as c_int;
            }
        }
        let cqe = if tagged {
            (&raw const self.tag.cqe).cast_mut()
        } else {
            (&raw const conn.unsignaled.cqe).cast_mut()
        };
        // SAFETY: Writing the `wr_cqe` member of the union.
        unsafe { *w.send.__bindgen_anon_1.wr_cqe.as_mut() = cqe };
        Ok(tagged)
    }

    /// Fills in the slot's REG_MR for `reg` with `access`, and its
    /// LOCAL_INV if the MR's last registration (`was`: valid, rkey) is
    /// still valid, and publishes the new one in the MR. Returns the
    /// chain's first request and whether it invalidates.
    #[inline]
    fn fill_reg(
        &self,
        w: &mut Wrs,
        reg: &Registration<'_>,
        access: Access,
        was: (bool, u32, bool),
    ) -> core::result::Result<(*const bindings::ib_send_wr, bool), CmdRefused> {
        let s = &self.slot.mr;
        // A mapping of this slot's MR, made by this claim (the claim is
        // borrowed by it): its key is still the MR's.
        if !reg.mr.is_some_and(|m| core::ptr::eq(m, s)) {
            return Err(CmdRefused::before(EINVAL));
        }
        w.reg.key = reg.rkey;
        let remote = match access {
            Access::Local => 0,
            Access::RemoteRead => bindings::ib_access_flags_IB_ACCESS_REMOTE_READ,
            Access::RemoteWrite => bindings::ib_access_flags_IB_ACCESS_REMOTE_WRITE,
        };
        // CAST: the access flags fit an int.
        w.reg.access = (bindings::ib_access_flags_IB_ACCESS_LOCAL_WRITE | remote) as c_int;
        let (first, inv) = if was.0 {
            // A registration the peer was given stays valid until
            // invalidated: it goes before the MR is registered anew.
            // SAFETY: Writing the `invalidate_rkey` member of the union.
            unsafe { *w.inv.ex.invalidate_rkey.as_mut() = was.1 };
            (&raw const w.inv, true)
        } else {
            (&raw const w.reg.wr, false)
        };
        // Published before the post: a completion racing it sees them.
        s.reg_rkey.store(reg.rkey, Ordering::Release);
        s.remote.store(access != Access::Local, Ordering::Release);
        s.valid.store(true, Ordering::Release);
        Ok((first, inv))
    }

    /// A post that went out in part or not at all (`err`, the provider's
    /// error, none if the fault injection cut the chain; `bad`, the
    /// request it stopped at): what of the chain (with a registration if
    /// `with_reg`, after a LOCAL_INV if `inv`) went out keeps its effects,
    /// and the MR's state before the post (`was`) is restored for the
    /// rest.
    #[cold]
    fn refused(
        &self,
        w: &Wrs,
        err: Option<Error>,
        bad: *const bindings::ib_send_wr,
        with_reg: bool,
        inv: bool,
        was: (bool, u32, bool),
    ) -> CmdRefused {
        let reg_posted = match err {
            None => true,
            Some(_) => with_reg && bad == (&raw const w.send),
        };
        let inv_posted = inv && (reg_posted || bad == (&raw const w.reg.wr));
        if with_reg && !reg_posted {
            let s = &self.slot.mr;
            s.reg_rkey.store(was.1, Ordering::Release);
            s.remote.store(was.2, Ordering::Release);
            s.valid.store(was.0 && !inv_posted, Ordering::Release);
        }
        CmdRefused {
            err: err.unwrap_or(EIO),
            reg_posted,
        }
    }
}

impl<H: CmHandler + QpHandler> CmdClaim<'_, H> {
    /// Gives back what the claim holds, as dropping it does.
    #[inline(always)]
    pub(crate) fn release(self) {
        self.give_back();
        // What `drop` would do is done: the token has no drop of its own.
        core::mem::forget(self);
    }

    #[inline(always)]
    fn give_back(&self) {
        if self.tag_held.get() {
            // INVARIANT: the tag is given back once, by its holder.
            self.tag.release();
            self.tag_held.set(false);
        }
    }
}

impl<H: CmHandler + QpHandler> Drop for CmdClaim<'_, H> {
    #[inline]
    fn drop(&mut self) {
        self.give_back();
        // The slot's token goes with `_token`.
    }
}
