// SPDX-License-Identifier: GPL-2.0

//! Registrations: fast-registration memory regions, used only through a
//! claim, and the [`Registration`] of a mapping as the peer and local work
//! requests name it (through an MR, or a single segment unregistered).

use super::dma::{
    DmaSg,
    Sge, //
};
use crate::{
    bindings,
    fault::{
        self,
        Site, //
    },
    kernel_ext::sg, //
    rdma::{
        verbs::Mr,
        Pd, //
    },
};
use core::{
    marker::PhantomData,
    ptr::null_mut,
    sync::atomic::{
        AtomicBool,
        AtomicU32,
        Ordering, //
    },
};
use kernel::{
    prelude::*,
    sync::Arc, //
};

/// A fast-registration MR owned by a connection.
///
/// # Invariants
///
/// `mr` is in the connection's PD. Its fields are written (by a mapping)
/// and read (to register it) only by the holder of its command slot's
/// claim (a [`super::CmdClaim`], which holds the slot's token: one at a
/// time, each one's end ordered before the next's start), so never by
/// two CPUs at once; invalidation ([`super::SendOp::LocalInv`]) needs no
/// claim, using only the MR's atomic state. The connection drops it after
/// destroying its QP, so no work request names it then.
pub(super) struct MrSlot {
    pub(super) mr: Mr,
    /// Registered and not yet invalidated. The state is the MR's, not that
    /// of the task that registered it: a registration stays valid after
    /// its task until it is invalidated, so the MR's next user must see it
    /// (and invalidate it before registering again).
    pub(super) valid: AtomicBool,
    /// The key of the last posted registration: what the peer was given
    /// and what an invalidation names (the MR's own key may already be the
    /// next one, set by [`MrSlot::map`]).
    pub(super) reg_rkey: AtomicU32,
    /// The last posted registration gave the peer remote access: while it
    /// is also `valid`, the MR is not mapped anew ([`MrSlot::map`]).
    pub(super) remote: AtomicBool,
}

impl MrSlot {
    pub(super) fn new(pd: &Arc<Pd>, pages: u32) -> Result<Self> {
        Ok(Self {
            mr: Mr::new_fast_reg(pd, pages)?,
            valid: AtomicBool::new(false),
            reg_rkey: AtomicU32::new(0),
            remote: AtomicBool::new(false),
        })
    }
}

impl MrSlot {
    /// Maps `sg` into the MR with a fresh key: what the peer is told, and
    /// what the command slot's REG_MR registers. The registration borrows
    /// `sg` (and, through the caller, the claim).
    ///
    /// # Safety
    ///
    /// The caller holds the claim of the MR's command slot and maps it no
    /// more while the returned registration lives.
    #[inline(always)]
    pub(super) unsafe fn map<'s>(&'s self, sg: &'s DmaSg) -> Result<Registration<'s>> {
        // Known invalid before anything is mapped: on rxe and siw a remap
        // rewrites the page list, iova and length in place, so a
        // registration the peer was given, still valid, would reach the
        // new pages. (A local-only one is invalidated in the REG_MR's
        // chain: the peer never had its key.)
        if self.valid.load(Ordering::Acquire) && self.remote.load(Ordering::Acquire) {
            pr_err!("an MR whose registration the peer holds was about to be mapped anew\n");
            return Err(EBUSY);
        }
        if fault::hit(Site::MapMr) {
            return Err(EINVAL);
        }
        let p = self.mr.as_raw();
        // SAFETY: The MR is valid (type invariant); its device is set at
        // allocation and never changed.
        let dev = unsafe { (*p).device };
        // An MR maps addresses of its own device only.
        if dev != sg.dev.as_ptr() {
            return Err(EINVAL);
        }
        // The keys' low byte is the consumer's to rotate; the registration in
        // the hardware keeps its key (`reg_rkey`) until invalidated.
        // SAFETY: The MR is valid (type invariant), and only the holder of
        // its claim (the caller) reads or writes its fields.
        unsafe {
            let key = ((*p).rkey & 0xff).wrapping_add(1) & 0xff;
            (*p).lkey = ((*p).lkey & 0xffff_ff00) | key;
            (*p).rkey = ((*p).rkey & 0xffff_ff00) | key;
        }
        let count = sg.count;
        // SAFETY: `sg` is a mapped scatterlist of `count` segments; the MR
        // is valid and claimed, as above.
        let n =
            unsafe { bindings::ib_map_mr_sg(p, sg.sgl.as_ptr(), count, null_mut(), MR_PAGE_SIZE) };
        if n != count {
            return Err(EINVAL);
        }
        // SAFETY: As above; `ib_map_mr_sg` set the MR's iova and length.
        let r = unsafe {
            Registration {
                rkey: (*p).rkey,
                lkey: (*p).lkey,
                iova: (*p).iova,
                len: u32::try_from((*p).length)?,
                mr: Some(self),
                dev,
                to_device: sg::device_reads(sg.dir),
                _sg: PhantomData,
            }
        };
        Ok(r)
    }
}

/// The page size of fast registrations: 4 KiB, as the SCSI hosts' virtual
/// boundary and sizing assume, whatever the CPU's page size.
pub(super) const MR_PAGE_SIZE: u32 = 4096;

/// A mapping of a [`DmaSg`] as a work request or the peer names it: what
/// a registration advertises to the peer, and the local key for local work
/// requests. It borrows the mapping it describes, so neither it nor the
/// entries made from it ([`Registration::sge`]) outlive the unmapping; one
/// made by [`super::CmdClaim::map`] also borrows the claim, so the MR is
/// neither mapped anew nor given back while it lives, and it is what the
/// claim's post registers ([`super::CmdPost`]). Its fields are private: a registration cannot be
/// made up, or changed to name other memory.
#[derive(Clone, Copy)]
pub(crate) struct Registration<'a> {
    pub(super) rkey: u32,
    pub(super) iova: u64,
    pub(super) len: u32,
    pub(super) lkey: u32,
    /// The claimed MR the mapping is in, if it is in one.
    pub(super) mr: Option<&'a MrSlot>,
    /// The device the data is mapped on, and whether for it to read.
    pub(super) dev: *mut bindings::ib_device,
    pub(super) to_device: bool,
    pub(super) _sg: PhantomData<&'a DmaSg>,
}

impl<'a> Registration<'a> {
    /// A single-segment mapping `sg` described without registration: the PD's
    /// local DMA lkey and its global rkey, at the segment's DMA address
    /// (ib_iser's `always_register=0`). `None` for several segments or a PD
    /// without a global rkey.
    pub(crate) fn unregistered(sg: &'a DmaSg, pd: &Pd) -> Option<Self> {
        Self::single(sg, pd, pd.global_rkey()?)
    }

    /// A single-segment mapping `sg` described for local work requests only:
    /// the PD's local DMA lkey at the segment's DMA address, and rkey 0, so
    /// that nothing is offered to the peer. For data the local side sends
    /// itself (a write's immediate data), which needs no registration.
    /// `None` for several segments.
    pub(crate) fn local_only(sg: &'a DmaSg, pd: &Pd) -> Option<Self> {
        Self::single(sg, pd, 0)
    }

    /// A single-segment mapping `sg` described without an MR: the PD's local
    /// DMA lkey and `rkey`, at the segment's DMA address. `None` for several
    /// segments.
    fn single(sg: &'a DmaSg, pd: &Pd, rkey: u32) -> Option<Self> {
        let (addr, len) = sg.single_on(pd)?;
        Some(Registration {
            rkey,
            iova: addr,
            len,
            lkey: pd.local_dma_lkey(),
            mr: None,
            dev: sg.dev.as_ptr(),
            to_device: sg::device_reads(sg.dir),
            _sg: PhantomData,
        })
    }

    /// The remote key (STag) the peer is given.
    pub(crate) fn rkey(&self) -> u32 {
        self.rkey
    }

    /// The virtual address the peer uses.
    pub(crate) fn iova(&self) -> u64 {
        self.iova
    }

    /// The registered length.
    pub(crate) fn len(&self) -> u32 {
        self.len
    }

    /// `len` bytes at `off` of the registered region as a local entry,
    /// borrowing what the registration borrows.
    pub(crate) fn sge(&self, off: u32, len: u32) -> Result<Sge<'a>> {
        if off.checked_add(len).is_none_or(|end| end > self.len) {
            return Err(EINVAL);
        }
        Ok(Sge {
            addr: self.iova + u64::from(off),
            length: len,
            lkey: self.lkey,
            buf: None,
            dev: self.dev,
            to_device: self.to_device,
            _mem: PhantomData,
        })
    }
}
