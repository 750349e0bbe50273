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
    kernel_ext::rcu::RcuRead,
    kernel_ext::softirq::InSoftirq,
    rdma::{
        device::DeviceRef,
        verbs::{
            ib_post_recv,
            post_result, //
        },
    },
};
use core::{
    cell::UnsafeCell,
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
    prelude::*, //
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
/// Made by the driver and given to a [`Connection`] to make one receive
/// slot with ([`Connection::give_recv_buf`]), which owns it from then on. Nothing
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

    /// The device the buffer is mapped on.
    pub(super) fn device_ptr(&self) -> *mut bindings::ib_device {
        self.0.dev.raw()
    }
}

/// The state of a receive slot, which says who may touch its buffer, and
/// its closing: a slot's posts are decided here, so that the decisions are
/// tested apart from any device (the post itself, which names the QP, is
/// the caller's closure).
///
/// # Invariants
///
/// `state` is `POSTED` exactly while a receive of the slot is posted (or
/// being posted by the caller that moved it there); from the completion of
/// that receive it is `READING` or `READING_REPOST` while a [`Received`] of
/// the slot lives, and only that [`Received`] moves it on. Once `closed` is
/// set, [`Gate::post_now`] posts nothing.
struct Gate {
    state: AtomicU8,
    /// The connection is draining its QP: a repost from a completion
    /// handler (which holds no `&Connection`) would land after the drain's
    /// marker, and complete after the QP and this slot are gone.
    closed: AtomicBool,
}

impl Gate {
    const fn new() -> Self {
        Self {
            state: AtomicU8::new(IDLE),
            closed: AtomicBool::new(false),
        }
    }

    /// A request to post: `Ok(true)` if the slot was idle and is now
    /// `POSTED` (the caller posts it, through [`Gate::post_now`]),
    /// `Ok(false)` if it is being read and the post deferred to the end
    /// of the read, `EBUSY` if a receive is posted (or a repost already
    /// asked for).
    fn request(&self) -> Result<bool> {
        loop {
            let s = self.state.load(Ordering::Acquire);
            let next = after_post(s).ok_or(EBUSY)?;
            if self
                .state
                .compare_exchange(s, next, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
            {
                return Ok(next == POSTED);
            }
            // The state moved under us (a completion, or the end of its
            // read): again.
        }
    }

    /// Posts by `post` unless the slot is closed (`ENOTCONN`); on failure
    /// the slot is idle again. The caller moved the slot to `POSTED`.
    #[inline(always)]
    fn post_now(&self, post: impl FnOnce() -> Result) -> Result {
        // A `Received` calls this inside its callback's read-side section
        // (see `close`).
        let r = if self.closed.load(Ordering::Acquire) {
            Err(ENOTCONN)
        } else {
            post()
        };
        if r.is_err() {
            // INVARIANT: nothing was posted.
            self.state.store(IDLE, Ordering::Release);
        }
        r
    }

    /// The slot's receive completed: the device is done writing.
    #[inline(always)]
    fn completed(&self) {
        self.state.store(READING, Ordering::Release);
    }

    /// The read ends in a repost, by `post` (see [`Gate::post_now`]).
    #[inline(always)]
    fn repost(&self, post: impl FnOnce() -> Result) -> Result {
        // INVARIANT: only the slot's `Received` moves it on from `READING`.
        self.state.store(POSTED, Ordering::Release);
        self.post_now(post)
    }

    /// The read ends without a repost of its own: a repost asked for
    /// meanwhile goes now, by `post` if the receive succeeded (`ok`), and
    /// its failure is reported to `failed`.
    fn end_read(&self, ok: bool, post: impl FnOnce() -> Result, failed: impl FnOnce(Error)) {
        // A post request may move `READING` to `READING_REPOST` meanwhile.
        let next = loop {
            let s = self.state.load(Ordering::Acquire);
            let next = after_read(s, ok);
            if self
                .state
                .compare_exchange(s, next, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
            {
                break next;
            }
        };
        if next == POSTED {
            if let Err(e) = self.post_now(post) {
                failed(e);
            }
        }
    }

    /// Refuses every post from now on.
    fn close(&self) {
        self.closed.store(true, Ordering::Release);
    }

    /// Back to idle: no receive is posted, nor ever again (closed).
    fn reset(&self) {
        self.state.store(IDLE, Ordering::Release);
    }
}

/// One receive slot of a connection: the completion entry its receives
/// name (first, so that a completion's `wr_cqe` leads back here), its tag,
/// its buffer and the scatter entry that names the buffer. A slot is made
/// with its buffer ([`Connection::give_recv_buf`]), so a completion finds
/// one without asking.
///
/// # Invariants
///
/// `buf`'s memory is written by nothing but the device, and by it only
/// while `gate` is `POSTED`. Once the gate is closed and an RCU grace
/// period has passed, nothing posts the slot again: posts through
/// `&Connection` are excluded by `destroy_qp`'s `&mut`, and a [`Received`]
/// posts inside the read-side section its completion callback holds.
/// `sge` names all of `buf` (its DMA address and length, with the PD's
/// local DMA lkey) and is never written after `new`. `wr` is read and
/// written only by the slot's poster (the one that moved the gate to
/// `POSTED`, one at a time), who links it to the slot where the slot is
/// (`sg_list` is `&sge` and `wr_cqe` is `&cqe` when it posts it).
#[repr(C)]
pub(super) struct RecvSlot {
    pub(super) cqe: bindings::ib_cqe,
    pub(super) id: u32,
    /// The scatter entry of every receive of the slot, made once: a
    /// repost names it where it is.
    sge: bindings::ib_sge,
    /// The receive request of the slot, kept from one post to the next.
    wr: UnsafeCell<bindings::ib_recv_wr>,
    gate: Gate,
    buf: RecvBuf,
}

impl RecvSlot {
    /// Slot `id`, completing to `done`, with its buffer `buf`, named by
    /// `lkey`. `EINVAL` for a buffer longer than a scatter entry takes.
    pub(super) fn new(id: u32, done: DoneFn, buf: RecvBuf, lkey: u32) -> Result<Self> {
        let sge = bindings::ib_sge {
            addr: buf.0.addr,
            length: u32::try_from(buf.0.len).map_err(|_| EINVAL)?,
            lkey,
        };
        // INVARIANT: `sge` names all of `buf`, with `lkey`.
        Ok(Self {
            cqe: bindings::ib_cqe { done: Some(done) },
            id,
            sge,
            wr: UnsafeCell::new(bindings::ib_recv_wr::default()),
            gate: Gate::new(),
            buf,
        })
    }

    /// Refuses every post from now on. A [`Received`] checks the flag and
    /// posts inside its callback's RCU read-side section, so once a grace
    /// period has passed after this (`Connection::destroy_qp` waits for
    /// one before it drains), its posts have gone or will be refused.
    pub(super) fn close(&self) {
        self.gate.close();
    }

    /// Posts a receive of the slot's buffer on `qp`: now if the slot is
    /// idle, once its [`Received`] ends if it is being read; `EBUSY` if a
    /// receive of it is posted (or a repost already asked for),
    /// `ENOTCONN` once it is closed.
    ///
    /// # Safety
    ///
    /// `qp` must be the QP whose completions reach this slot, and valid
    /// unless the slot is closed.
    pub(super) unsafe fn post(&self, qp: *mut bindings::ib_qp) -> Result {
        if !self.gate.request()? {
            return Ok(());
        }
        // SAFETY: `qp` is valid unless the slot is closed, when `post_now`
        // does not call this; the slot was moved to `POSTED` just above,
        // by this call, so no `Received` of it lives.
        self.gate.post_now(|| unsafe { self.post_buf(qp) })
    }

    /// Hands the buffer to the device and posts its receive.
    ///
    /// # Safety
    ///
    /// `qp` as in [`RecvSlot::post`], and valid; the caller moved the
    /// slot to `POSTED` (so it alone posts it now) and no [`Received`] of
    /// it lives.
    unsafe fn post_buf(&self, qp: *mut bindings::ib_qp) -> Result {
        if fault::hit(Site::PostRecv) {
            return Err(EIO);
        }
        self.buf.0.give_to_device();
        // SAFETY: The caller moved the slot to `POSTED` (function
        // contract): the request is this call's alone (type invariant).
        let wr = unsafe { &mut *self.wr.get() };
        // The provider only reads the scatter list (`sg_list` is a mutable
        // pointer in the C declaration, which takes the list as `const`
        // with the request): the slot's entry, never written. Linked once,
        // where the slot is (again if it moved).
        let sge = (&raw const self.sge).cast_mut();
        if wr.sg_list != sge {
            self.link(wr, sge);
        }
        let mut bad = core::ptr::null();
        // SAFETY: `qp` is valid (this function's contract); `wr` and the
        // slot's `sge` outlive the call, and the provider only reads them;
        // the slot and its buffer live as long as the connection, whose QP
        // is destroyed (its receives completed) before either goes.
        post_result(unsafe { ib_post_recv(qp, wr, &mut bad) })
    }

    /// Links the slot's request `wr` to the slot where it is: its entry
    /// `sge` and its completion entry.
    #[cold]
    fn link(&self, wr: &mut bindings::ib_recv_wr, sge: *mut bindings::ib_sge) {
        *wr = bindings::ib_recv_wr {
            sg_list: sge,
            num_sge: 1,
            ..Default::default()
        };
        // SAFETY: Writing the `wr_cqe` member of the union.
        unsafe { *wr.__bindgen_anon_1.wr_cqe.as_mut() = (&raw const self.cqe).cast_mut() };
    }

    /// Back to idle once the QP is destroyed: no receive is posted then,
    /// nor ever again (`close`).
    pub(super) fn reset(&self) {
        self.gate.reset();
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
/// (`'a`: the QP is destroyed only after its completions are handled).
/// `rcu` is the read-side section the completion callback is (its
/// softirq handler's) around the handler, inside which every repost of
/// this value goes. `softirq`,
/// if set, is the proof of the callback, which ib_core runs in softirq.
pub(crate) struct Received<'a, H: QpHandler + ?Sized> {
    slot: &'a RecvSlot,
    qp: NonNull<bindings::ib_qp>,
    handler: &'a H,
    rcu: &'a RcuRead,
    softirq: Option<&'a InSoftirq>,
    wc: Wc,
    len: usize,
}

impl<'a, H: QpHandler + ?Sized> Received<'a, H> {
    /// # Safety
    ///
    /// `slot`'s receive completed with `wc` on `qp`, valid for `'a`; and no
    /// other [`Received`] of it lives.
    pub(super) unsafe fn new(
        slot: &'a RecvSlot,
        qp: NonNull<bindings::ib_qp>,
        handler: &'a H,
        rcu: &'a RcuRead,
        softirq: Option<&'a InSoftirq>,
        wc: Wc,
    ) -> Self {
        slot.gate.completed();
        let len = if wc.ok() {
            let b = &slot.buf.0;
            // The device's count is not trusted: no more than the buffer
            // holds (a longer count is then seen as the overrun it is).
            // CAST: a u32 fits a usize.
            let n = (wc.byte_len as usize).min(b.len);
            b.take_from_device(n);
            n
        } else {
            // A failed receive left nothing to read.
            0
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
    pub(crate) fn rcu(&self) -> &'a RcuRead {
        self.rcu
    }

    /// The proof that the completion is handled in softirq, as ib_core
    /// handles every completion of a connection's CQ (`None` where a
    /// receive is reported otherwise).
    #[inline(always)]
    pub(crate) fn softirq(&self) -> Option<&'a InSoftirq> {
        self.softirq
    }

    /// The slot's tag.
    pub(crate) fn tag(&self) -> u32 {
        self.slot.id
    }

    /// The completion.
    pub(crate) fn wc(&self) -> &Wc {
        &self.wc
    }

    /// The bytes received (none if the receive failed), borrowed from the
    /// buffer until the repost.
    pub(crate) fn bytes(&self) -> &[u8] {
        // SAFETY: `len` bytes of the buffer were written by the device,
        // which is done with it, and synced for the CPU (type invariant).
        // Nothing writes them while this borrow lives: the slot is not
        // posted again before this value is consumed or dropped, which the
        // borrow excludes, and nothing else writes a receive buffer. (A
        // PD with a global rkey, `Pd::new_with_global_rkey`, lets the peer
        // write all of memory, this buffer as much as any other.)
        unsafe { core::slice::from_raw_parts(self.slot.buf.0.ptr.as_ptr(), self.len) }
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
        let (slot, qp) = (this.slot, this.qp);
        // SAFETY: `qp` is the slot's, valid while its completion is
        // handled (type invariant), as `post_buf` asks; the gate moves the
        // slot to `POSTED` before it calls this, and this value, its
        // `Received`, is gone with the call.
        slot.gate.repost(|| unsafe { slot.post_buf(qp.as_ptr()) })
    }
}

impl<H: QpHandler + ?Sized> Drop for Received<'_, H> {
    // Small, so that the value's drop inlines where it goes out of scope
    // and the value itself stays in registers (not spilled to memory for
    // a `&mut` to an out-of-line drop): the end of a read without a
    // repost is the rare path (the login receive, failed receives).
    #[inline(always)]
    fn drop(&mut self) {
        // SAFETY: This value, the slot's `Received`, ends here: `qp` is the
        // slot's QP, valid while its completion is handled (type
        // invariant).
        unsafe { end_read(self.slot, self.qp, self.handler, self.wc.ok()) };
    }
}

/// The end of a read without a repost of its own ([`Received`]'s drop).
///
/// # Safety
///
/// The slot's [`Received`] ends with this call, and `qp` is the slot's
/// QP, valid while its completion is handled.
#[cold]
#[inline(never)]
unsafe fn end_read<H: QpHandler + ?Sized>(
    slot: &RecvSlot,
    qp: NonNull<bindings::ib_qp>,
    h: &H,
    ok: bool,
) {
    slot.gate.end_read(
        ok,
        // SAFETY: As in `Received::repost`: the slot's `Received` ends with
        // this function (its contract), and the gate moved the slot to
        // `POSTED` before it calls this.
        || unsafe { slot.post_buf(qp.as_ptr()) },
        |e| h.repost_failed(slot.id, e),
    );
}

/// Receives the completions of a [`Connection`]'s work requests, in softirq
/// context, by the tag the work request was posted with.
pub(crate) trait QpHandler: Send + Sync + 'static {
    /// The handler's own state of each command slot, kept in the slot
    /// ([`CmdClaim::data`](super::CmdClaim::data),
    /// [`CmdRef::data`](super::CmdRef::data)).
    type CmdData: Send + Sync + 'static;
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
    /// `rcu` is the read section the completion is handled in (softirq).
    fn send_done(&self, done: SendDone<'_, Self::CmdData>, wc: Wc, rcu: &RcuRead);
    /// The QP reported an asynchronous event (possibly in atomic context:
    /// providers report from their completion paths).
    fn qp_event(&self, _ev: super::super::AsyncEvent) {}
}

#[kunit_tests(riser_rdma_rx)]
mod tests {
    use super::*;
    use core::cell::Cell;

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

    /// A post that records that it was reached and returns `r`.
    fn post_by(reached: &Cell<bool>, r: Result) -> impl FnOnce() -> Result + '_ {
        move || {
            reached.set(true);
            r
        }
    }

    /// The receive-repost gate `Connection::destroy_qp` relies on: once a
    /// slot is closed, a handler's repost of a successful receive is
    /// refused with `ENOTCONN` before the post is reached, and so is a
    /// later post request; an open slot's repost reaches the post. A
    /// refused or failed post leaves the slot idle.
    #[test]
    fn a_closed_slot_refuses_the_handlers_repost() {
        let reached = Cell::new(false);
        let g = Gate::new();
        assert_eq!(g.request(), Ok(true));
        assert_eq!(g.post_now(post_by(&reached, Ok(()))), Ok(()));
        assert!(reached.replace(false));
        assert_eq!(g.state.load(Ordering::Relaxed), POSTED);
        // A post request meets a posted receive.
        assert_eq!(g.request(), Err(EBUSY));
        g.completed();
        assert_eq!(g.repost(post_by(&reached, Ok(()))), Ok(()));
        assert!(reached.replace(false));
        assert_eq!(g.state.load(Ordering::Relaxed), POSTED);
        // A post the provider refuses leaves the slot idle.
        g.completed();
        assert_eq!(g.repost(post_by(&reached, Err(EIO))), Err(EIO));
        assert!(reached.replace(false));
        assert_eq!(g.state.load(Ordering::Relaxed), IDLE);
        assert_eq!(g.request(), Ok(true));
        assert_eq!(g.post_now(post_by(&reached, Ok(()))), Ok(()));
        assert!(reached.replace(false));
        // Closed while a receive is posted: its completion's repost is
        // refused before the post.
        g.close();
        g.completed();
        assert_eq!(g.repost(post_by(&reached, Ok(()))), Err(ENOTCONN));
        assert!(!reached.get());
        assert_eq!(g.state.load(Ordering::Relaxed), IDLE);
        // The slot is idle, and a post request is refused too.
        assert_eq!(g.request(), Ok(true));
        assert_eq!(g.post_now(post_by(&reached, Ok(()))), Err(ENOTCONN));
        assert!(!reached.get());
        assert_eq!(g.state.load(Ordering::Relaxed), IDLE);
    }

    /// A post request made while a receive is read is deferred to the end
    /// of the read; if the slot was closed meanwhile, the deferred repost
    /// is refused there, and a refused or failed one is reported
    /// (`QpHandler::repost_failed`); a failed receive posts nothing.
    #[test]
    fn a_deferred_repost_meets_the_gate_at_the_end_of_the_read() {
        // (closed, receive ok, the post's result) -> (post reached, the
        // reported errno, the state after)
        let cases = [
            ((false, true, Ok(())), (true, 0, POSTED)),
            ((false, true, Err(EINVAL)), (true, EINVAL.to_errno(), IDLE)),
            ((true, true, Ok(())), (false, ENOTCONN.to_errno(), IDLE)),
            ((false, false, Ok(())), (false, 0, IDLE)),
            ((true, false, Ok(())), (false, 0, IDLE)),
        ];
        for ((close, ok, post), (want_reached, want_errno, want_state)) in cases {
            let reached = Cell::new(false);
            let failed = Cell::new(0);
            let g = Gate::new();
            assert_eq!(g.request(), Ok(true));
            assert_eq!(g.post_now(|| Ok(())), Ok(()));
            g.completed();
            // Deferred: the slot is being read.
            assert_eq!(g.request(), Ok(false));
            assert_eq!(g.state.load(Ordering::Relaxed), READING_REPOST);
            // Asked once only.
            assert_eq!(g.request(), Err(EBUSY));
            if close {
                g.close();
            }
            g.end_read(ok, post_by(&reached, post), |e| failed.set(e.to_errno()));
            assert_eq!(reached.get(), want_reached);
            assert_eq!(failed.get(), want_errno);
            assert_eq!(g.state.load(Ordering::Relaxed), want_state);
        }
    }
}
