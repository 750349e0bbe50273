// SPDX-License-Identifier: GPL-2.0

//! Receives: the connection's receive slots, each owning the buffer the
//! device writes a PDU into, and [`Received`], through which a completion
//! handler reads that PDU in place and reposts it.
//!
//! A receive buffer is read without a copy, so the types make sure nothing
//! writes it while it is read: the slot owns it (it is never shared, and
//! has no CPU write), and its state says who may touch it. The device
//! writes it only while a receive naming it is posted (`POSTED`); from its
//! completion until it is reposted it is the handler's to read (`READING`),
//! through a [`Received`] whose borrow of it ends before a repost, which
//! consumes the `Received`. A repost asked for meanwhile (by
//! [`Connection::post_recv`], from any CPU) is deferred until then.

use super::{
    dma::DmaBuf,
    wr::{
        DoneFn,
        SendDone,
        Wc, //
    },
};
use crate::{
    bindings,
    fault::{
        self,
        Site, //
    },
    kernel_ext::softirq::InSoftirq,
    rdma::{
        device::DeviceRef,
        verbs::ib_post_recv, //
    },
};
use core::{
    ptr::NonNull,
    sync::atomic::{
        AtomicBool,
        AtomicU8,
        Ordering, //
    },
};
use kernel::{
    alloc::KVec,
    dma::DataDirection,
    error::to_result,
    prelude::*,
    sync::{
        rcu,
        SetOnce, //
    },
};

/// No receive of the slot is posted, or being read.
const IDLE: u8 = 0;
/// A receive is posted: the device may write the buffer.
const POSTED: u8 = 1;
/// Completed: a [`Received`] reads the buffer.
const READING: u8 = 2;
/// As `READING`, and a repost was asked for: it goes when the
/// [`Received`] ends.
const READING_REPOST: u8 = 3;

/// Where a request to post a slot in state `s` takes it: `POSTED` (the
/// caller posts now), `READING_REPOST` (posted when the read ends), or
/// nowhere (`None`: a receive is posted, or a repost already asked for).
fn after_post(s: u8) -> Option<u8> {
    match s {
        IDLE => Some(POSTED),
        READING => Some(READING_REPOST),
        _ => None,
    }
}

/// Where the end of a read takes a slot in state `s` (`READING` or
/// `READING_REPOST`): `POSTED` (the caller posts now) when a repost was
/// asked for and the receive succeeded, else `IDLE`. A failed receive
/// means the QP is being flushed: nothing is posted then.
fn after_read(s: u8, ok: bool) -> u8 {
    if s == READING_REPOST && ok {
        POSTED
    } else {
        IDLE
    }
}

/// Bytes between the starts of two receive buffers carved from one chunk
/// (or more): each starts on cache lines of its own, so that syncing one
/// for the CPU (which on a machine without coherent DMA invalidates whole
/// lines) never touches a line of another, which the device may be
/// writing.
const RECV_ALIGN: usize = 256;

/// A buffer the device writes received PDUs into, mapped on one device.
/// Made by the driver and given to one receive slot of a [`Connection`]
/// ([`Connection::give_recv_buf`]), which owns it from then on. Nothing
/// writes it but the device, while a receive naming it is posted: its
/// [`DmaBuf`] is never shared, and the other buffers of its chunk (other
/// receive buffers) are on other cache lines.
pub(crate) struct RecvBuf(DmaBuf);

impl RecvBuf {
    /// Allocates `len` zeroed bytes and maps them on `dev` for it to write.
    pub(crate) fn new(dev: &DeviceRef, len: usize) -> Result<Self> {
        Ok(Self(DmaBuf::alloc(dev, len, DataDirection::FromDevice)?))
    }

    /// `n` buffers of `len` zeroed bytes each, mapped on `dev` for it to
    /// write, carved from a few chunks ([`DmaBuf::carve`]).
    pub(crate) fn carve(dev: &DeviceRef, len: usize, n: usize) -> Result<KVec<Self>> {
        let bufs = DmaBuf::carve_into(dev, len, n, RECV_ALIGN, DataDirection::FromDevice)?;
        let mut out = KVec::with_capacity(bufs.len(), GFP_KERNEL)?;
        for b in bufs {
            out.push(Self(b), GFP_KERNEL)?;
        }
        Ok(out)
    }

    /// The buffer's length in bytes.
    pub(crate) fn len(&self) -> usize {
        self.0.len
    }

    /// The device the buffer is mapped on.
    pub(super) fn device_ptr(&self) -> *mut bindings::ib_device {
        self.0.dev.raw()
    }
}

/// One receive slot of a connection: the completion entry its receives
/// name (first, so that a completion's `wr_cqe` leads back here), its tag,
/// the buffer given to it and the lkey that names the buffer.
///
/// # Invariants
///
/// `state` is `POSTED` exactly while a receive naming `buf` is posted (or
/// being posted by the caller that moved it there); from the completion
/// of that receive it is `READING` or `READING_REPOST` while a
/// [`Received`] of the slot lives, and only that [`Received`] moves it on.
/// `buf`'s memory is written by nothing but the device, and by it only
/// while `POSTED`. Once `closed` is set and an RCU grace period has passed,
/// nothing posts the slot again: posts through `&Connection` are excluded
/// by `destroy_qp`'s `&mut`, and a [`Received`] posts inside the
/// read-side section its completion callback holds.
#[repr(C)]
pub(super) struct RecvSlot {
    pub(super) cqe: bindings::ib_cqe,
    pub(super) id: u32,
    state: AtomicU8,
    /// The connection is draining its QP: a repost from a completion
    /// handler (which holds no `&Connection`) would land after the drain's
    /// marker, and complete after the QP and this slot are gone.
    closed: AtomicBool,
    buf: SetOnce<(RecvBuf, u32)>,
}

impl RecvSlot {
    pub(super) fn new(id: u32, done: DoneFn) -> Self {
        Self {
            cqe: bindings::ib_cqe { done: Some(done) },
            id,
            state: AtomicU8::new(IDLE),
            closed: AtomicBool::new(false),
            buf: SetOnce::default(),
        }
    }

    /// Refuses every post from now on. A [`Received`] checks the flag and
    /// posts inside its callback's RCU read-side section, so once a grace
    /// period has passed after this (`Connection::destroy_qp` waits for
    /// one before it drains), its posts have gone or will be refused.
    pub(super) fn close(&self) {
        self.closed.store(true, Ordering::Release);
    }

    /// Gives the slot its buffer, named by `lkey`; once (`EBUSY` after).
    pub(super) fn give(&self, buf: RecvBuf, lkey: u32) -> Result {
        if self.buf.populate((buf, lkey)) {
            Ok(())
        } else {
            Err(EBUSY)
        }
    }

    /// Posts a receive of the slot's buffer on `qp`: now if the slot is
    /// idle, once its [`Received`] ends if it is being read; `EBUSY` if a
    /// receive of it is posted (or a repost already asked for), `EINVAL`
    /// if it has no buffer.
    ///
    /// # Safety
    ///
    /// `qp` must be the QP whose completions reach this slot, and valid
    /// unless the slot has no buffer or is closed: only a post of the
    /// buffer names it (`post_buf`, reached past both checks).
    pub(super) unsafe fn post(&self, qp: *mut bindings::ib_qp) -> Result {
        // (A slot without a buffer is refused by `post_buf`.)
        loop {
            let s = self.state.load(Ordering::Acquire);
            let next = after_post(s).ok_or(EBUSY)?;
            if self
                .state
                .compare_exchange(s, next, Ordering::AcqRel, Ordering::Acquire)
                .is_err()
            {
                // The state moved under us (a completion, or the end of
                // its read): again.
                continue;
            }
            if next != POSTED {
                return Ok(());
            }
            // SAFETY: `qp` is valid (contract); the slot was moved to
            // `POSTED` just above, by this call, so no `Received` of it
            // lives.
            return unsafe { self.post_now(qp) };
        }
    }

    /// Hands the buffer to the device and posts its receive; on failure
    /// the slot is idle again.
    ///
    /// # Safety
    ///
    /// `qp` as in [`RecvSlot::post`]; the caller moved the slot to
    /// `POSTED` (so it alone posts it now) and no [`Received`] of it lives.
    #[inline(always)]
    unsafe fn post_now(&self, qp: *mut bindings::ib_qp) -> Result {
        // A `Received` calls this inside its callback's read-side section
        // (see `close`).
        let r = if self.closed.load(Ordering::Acquire) {
            Err(ENOTCONN)
        } else {
            // SAFETY: As this function's contract.
            unsafe { self.post_buf(qp) }
        };
        if r.is_err() {
            // INVARIANT: nothing was posted.
            self.state.store(IDLE, Ordering::Release);
        }
        r
    }

    /// Posts the receive, for [`RecvSlot::post_now`].
    ///
    /// # Safety
    ///
    /// As for [`RecvSlot::post_now`].
    unsafe fn post_buf(&self, qp: *mut bindings::ib_qp) -> Result {
        let (buf, lkey) = self.buf.as_ref().ok_or(EINVAL)?;
        if fault::hit(Site::PostRecv) {
            return Err(EIO);
        }
        let b = &buf.0;
        b.give_to_device();
        let mut sge = bindings::ib_sge {
            addr: b.addr,
            // CAST: receive buffers are made from u32 sizes (`give` is
            // refused one longer).
            length: b.len as u32,
            lkey: *lkey,
        };
        let mut wr = bindings::ib_recv_wr {
            sg_list: &mut sge,
            num_sge: 1,
            ..Default::default()
        };
        // SAFETY: Writing the `wr_cqe` member of the union.
        unsafe { *wr.__bindgen_anon_1.wr_cqe.as_mut() = (&raw const self.cqe).cast_mut() };
        let mut bad = core::ptr::null();
        // SAFETY: `qp` is valid (this function's contract); `wr` and `sge`
        // outlive the call; the slot and its buffer live as long as the
        // connection, whose QP is destroyed (its receives completed)
        // before either goes.
        to_result(unsafe { ib_post_recv(qp, &wr, &mut bad) })
    }

    /// Back to idle once the QP is destroyed: no receive is posted then,
    /// nor ever again (`close`).
    pub(super) fn reset(&self) {
        self.state.store(IDLE, Ordering::Release);
    }
}

/// A completed receive, handed to [`QpHandler::recv_done`]: the PDU is read
/// in place ([`Received::bytes`]) and the buffer reposted
/// ([`Received::repost`]) or left idle (dropped). While it lives, the
/// slot's receive is not posted again, so the device does not write what
/// the handler reads; a repost asked for meanwhile goes when it is dropped.
///
/// # Invariants
///
/// The slot is `READING` or `READING_REPOST`, moved there by the
/// completion this value reports; `len` bytes of its buffer were synced for
/// the CPU. `qp` is the slot's QP, valid while the completion is handled
/// (`'a`: the QP is destroyed only after its completions are handled),
/// unless the slot has no buffer: then nothing is posted, and `qp` never
/// used.
/// `rcu` is the read-side section the completion callback holds around
/// the handler, inside which every repost of this value goes. `softirq`,
/// if set, is the proof of the callback, which ib_core runs in softirq.
pub(crate) struct Received<'a, H: QpHandler + ?Sized> {
    slot: &'a RecvSlot,
    qp: NonNull<bindings::ib_qp>,
    handler: &'a H,
    rcu: &'a rcu::Guard,
    softirq: Option<&'a InSoftirq>,
    wc: Wc,
    len: usize,
}

impl<'a, H: QpHandler + ?Sized> Received<'a, H> {
    /// # Safety
    ///
    /// `slot`'s receive completed with `wc` on `qp` (valid for `'a`), or
    /// `slot` has no buffer (nothing was received into it, nothing will be
    /// posted, and `qp` is not used); and no other [`Received`] of it
    /// lives.
    pub(super) unsafe fn new(
        slot: &'a RecvSlot,
        qp: NonNull<bindings::ib_qp>,
        handler: &'a H,
        rcu: &'a rcu::Guard,
        softirq: Option<&'a InSoftirq>,
        wc: Wc,
    ) -> Self {
        // The device is done writing: its receive completed.
        slot.state.store(READING, Ordering::Release);
        let len = match slot.buf.as_ref() {
            // The device's count is not trusted: no more than the buffer
            // holds (a longer count is then seen as the overrun it is).
            // CAST: a u32 fits a usize.
            Some((b, _)) if wc.ok() => {
                let n = (wc.byte_len as usize).min(b.0.len);
                b.0.take_from_device(n);
                n
            }
            // A failed receive left nothing to read.
            _ => 0,
        };
        // INVARIANT: moved to `READING` above; `len` bytes synced.
        Self {
            slot,
            qp,
            handler,
            rcu,
            softirq,
            wc,
            len,
        }
    }

    /// The RCU read-side section the completion is handled in, for the
    /// handler's own RCU-protected reads.
    pub(crate) fn rcu(&self) -> &'a rcu::Guard {
        self.rcu
    }

    /// The proof that the completion is handled in softirq, as ib_core
    /// handles every completion of a connection's CQ (`None` where a
    /// receive is reported otherwise: the KUnit tests).
    #[inline(always)]
    pub(crate) fn softirq(&self) -> Option<&'a InSoftirq> {
        self.softirq
    }

    /// The slot's tag.
    pub(crate) fn tag(&self) -> u32 {
        self.slot.id
    }

    /// The completion.
    pub(crate) fn wc(&self) -> Wc {
        self.wc
    }

    /// The bytes received (none if the receive failed), borrowed from the
    /// buffer until the repost.
    pub(crate) fn bytes(&self) -> &[u8] {
        let Some((b, _)) = self.slot.buf.as_ref() else {
            return &[];
        };
        // SAFETY: `len` bytes of the buffer were written by the device,
        // which is done with it, and synced for the CPU (type invariant).
        // Nothing writes them while this borrow lives: the slot is not
        // posted again before this value is consumed or dropped, which the
        // borrow excludes, and nothing else writes a receive buffer. (A
        // PD with a global rkey, `Pd::new_with_global_rkey`, lets the peer
        // write all of memory, this buffer as much as any other.)
        unsafe { core::slice::from_raw_parts(b.0.ptr.as_ptr(), self.len) }
    }

    /// Reposts the receive, ending the read. A failed receive (flushed,
    /// or in error: the QP is in the error state) is not posted again,
    /// where it would only fail anew: the slot is left as dropping the
    /// value leaves it, and `ENOTCONN` returned.
    pub(crate) fn repost(self) -> Result {
        if !self.wc.ok() {
            drop(self);
            return Err(ENOTCONN);
        }
        let this = core::mem::ManuallyDrop::new(self);
        // INVARIANT: only this value moves the slot on from `READING`.
        this.slot.state.store(POSTED, Ordering::Release);
        // SAFETY: `qp` is the slot's, valid unless the slot has no buffer
        // (type invariant), as `post_now` asks; the slot
        // was moved to `POSTED` just above, and this value, its
        // `Received`, is gone with the call.
        unsafe { this.slot.post_now(this.qp.as_ptr()) }
    }
}

impl<H: QpHandler + ?Sized> Drop for Received<'_, H> {
    fn drop(&mut self) {
        let state = &self.slot.state;
        // A post request may move `READING` to `READING_REPOST` meanwhile.
        let next = loop {
            let s = state.load(Ordering::Acquire);
            let next = after_read(s, self.wc.ok());
            if state
                .compare_exchange(s, next, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
            {
                break next;
            }
        };
        if next != POSTED {
            return;
        }
        // SAFETY: As in `repost`: this value, the slot's `Received`, ends
        // here, and moved the slot to `POSTED` just above.
        if let Err(e) = unsafe { self.slot.post_now(self.qp.as_ptr()) } {
            self.handler.repost_failed(self.slot.id, e);
        }
    }
}

/// Receives the completions of a [`Connection`]'s work requests, in softirq
/// context, by the tag the work request was posted with.
pub(crate) trait QpHandler: Send + Sync + 'static {
    /// A receive completed: `rx` reads it, and reposts it or (dropped)
    /// leaves the tag idle.
    fn recv_done(&self, rx: Received<'_, Self>);
    /// A repost asked for while tag `tag`'s last receive was being read
    /// ([`Connection::post_recv`] while a [`Received`] lived) failed when
    /// the read ended: the tag is idle, with one receive fewer posted.
    fn repost_failed(&self, tag: u32, e: Error);
    /// A signaled send completed, or any send failed. Unsignaled work
    /// requests (registration, invalidation) report with tag
    /// [`UNSIGNALED_TAG`](super::UNSIGNALED_TAG), on error only. The tag stays taken (no work
    /// request can be posted on it) until `done` is released or dropped,
    /// so what the handler keeps by tag is still the completed request's.
    fn send_done(&self, done: SendDone<'_>, wc: Wc);
    /// The QP reported an asynchronous event (possibly in atomic context:
    /// providers report from their completion paths).
    fn qp_event(&self, _ev: super::super::AsyncEvent) {}
}

#[kunit_tests(riser_rdma_rx)]
mod tests {
    use super::{
        super::wr::SendDone,
        *, //
    };
    use core::sync::atomic::AtomicI32;

    /// A post request posts an idle slot, defers on one being read, and
    /// is refused on one posted or with a repost already asked for.
    #[test]
    fn a_post_request_posts_defers_or_is_refused() {
        assert_eq!(after_post(IDLE), Some(POSTED));
        assert_eq!(after_post(READING), Some(READING_REPOST));
        assert_eq!(after_post(POSTED), None);
        assert_eq!(after_post(READING_REPOST), None);
    }

    /// The end of a read posts the slot only if a repost was asked for
    /// and the receive succeeded; otherwise the slot is idle, so the next
    /// request posts it.
    #[test]
    fn the_end_of_a_read_posts_only_a_deferred_repost() {
        assert_eq!(after_read(READING, true), IDLE);
        assert_eq!(after_read(READING, false), IDLE);
        assert_eq!(after_read(READING_REPOST, true), POSTED);
        assert_eq!(after_read(READING_REPOST, false), IDLE);
        // A slot at rest takes a post request.
        assert_eq!(after_post(after_read(READING, true)), Some(POSTED));
    }

    /// Records what [`QpHandler::repost_failed`] was told.
    #[derive(Default)]
    struct Recorder {
        /// The errno of the last failed deferred repost, 0 if none.
        failed: AtomicI32,
    }

    impl QpHandler for Recorder {
        fn recv_done(&self, _rx: Received<'_, Self>) {}
        fn repost_failed(&self, _tag: u32, e: Error) {
            self.failed.store(e.to_errno(), Ordering::Relaxed);
        }
        fn send_done(&self, _done: SendDone<'_>, _wc: Wc) {}
    }

    /// Never called: the slots below are never posted to a QP.
    ///
    /// # Safety
    ///
    /// None needed: it reads nothing.
    unsafe extern "C" fn no_completion(_cq: *mut bindings::ib_cq, _wc: *mut bindings::ib_wc) {}

    const DONE: Wc = Wc {
        status: bindings::ib_wc_status_IB_WC_SUCCESS,
        byte_len: 0,
        invalidated: None,
    };

    /// The receive-repost gate `Connection::destroy_qp` relies on: once a
    /// slot is closed, a handler's repost of a successful receive is
    /// refused with `ENOTCONN`, and so is a later post request. An open
    /// slot's repost gets past the gate to the post itself, which fails
    /// with `EINVAL` because the slot was given no buffer (before any use
    /// of the QP), so the two errors tell the gate's refusal apart.
    #[test]
    fn a_closed_slot_refuses_the_handlers_repost() {
        let h = Recorder::default();
        let slot = RecvSlot::new(0, no_completion);
        let qp = NonNull::<bindings::ib_qp>::dangling();
        let rcu = rcu::read_lock();
        // SAFETY: `slot` has no buffer, so `new`'s contract does not ask
        // for a valid QP: a repost stops at the closed flag or at the
        // missing buffer (`post_now`, `post_buf`) before `qp` is named.
        // No other `Received` of it lives.
        let rx = unsafe { Received::new(&slot, qp, &h, &rcu, None, DONE) };
        assert_eq!(rx.repost(), Err(EINVAL));
        slot.close();
        // SAFETY: As above.
        let rx = unsafe { Received::new(&slot, qp, &h, &rcu, None, DONE) };
        assert_eq!(rx.repost(), Err(ENOTCONN));
        // The slot is idle, and a post request is refused too.
        assert_eq!(slot.state.load(Ordering::Relaxed), IDLE);
        // SAFETY: The slot is closed (and has no buffer): `post` does not
        // name `qp`.
        assert_eq!(unsafe { slot.post(qp.as_ptr()) }, Err(ENOTCONN));
        assert_eq!(h.failed.load(Ordering::Relaxed), 0);
    }

    /// A post request made while a receive is read is deferred to the end
    /// of the read; if the slot was closed meanwhile, the deferred repost
    /// is refused there and the handler told (`repost_failed`).
    #[test]
    fn a_deferred_repost_meets_the_gate_at_the_end_of_the_read() {
        for (close, errno) in [(false, EINVAL), (true, ENOTCONN)] {
            let h = Recorder::default();
            let slot = RecvSlot::new(0, no_completion);
            let qp = NonNull::<bindings::ib_qp>::dangling();
            let rcu = rcu::read_lock();
            // SAFETY: As in the test above.
            let rx = unsafe { Received::new(&slot, qp, &h, &rcu, None, DONE) };
            // SAFETY: The slot has no buffer: `post` does not name `qp`
            // (here it only defers, `rx` living).
            assert_eq!(unsafe { slot.post(qp.as_ptr()) }, Ok(()));
            assert_eq!(slot.state.load(Ordering::Relaxed), READING_REPOST);
            if close {
                slot.close();
            }
            drop(rx);
            assert_eq!(h.failed.load(Ordering::Relaxed), errno.to_errno());
            assert_eq!(slot.state.load(Ordering::Relaxed), IDLE);
        }
    }
}
