// SPDX-License-Identifier: GPL-2.0

//! Work requests and completions: the send operations riser posts (naming
//! entries and registrations that borrow the memory they name), the
//! completions, and the tags that hold a posted request's buffer until its
//! completion.

use super::dma::{
    BufRef,
    DmaBufs,
    Sge, //
};
use crate::bindings;
use core::{
    ffi::c_void,
    marker::PhantomData,
    ptr::{
        null_mut,
        NonNull, //
    },
    sync::atomic::{
        AtomicPtr,
        AtomicU32,
        Ordering, //
    },
};
use kernel::{
    prelude::*,
    sync::Arc, //
};

/// A work completion, as riser's handlers see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Wc {
    /// `IB_WC_SUCCESS` or the error status.
    pub(crate) status: u32,
    /// Bytes received (receives only).
    pub(crate) byte_len: u32,
    /// The rkey the peer invalidated with SEND_WITH_INV, if any.
    pub(crate) invalidated: Option<u32>,
}

impl Wc {
    /// Whether the work request succeeded.
    pub(crate) fn ok(&self) -> bool {
        self.status == bindings::ib_wc_status_IB_WC_SUCCESS
    }

    /// Whether the QP was flushed (torn down), as opposed to a real error.
    pub(crate) fn flushed(&self) -> bool {
        self.status == bindings::ib_wc_status_IB_WC_WR_FLUSH_ERR
    }

    /// Whether the peer answered receive-not-ready past the QP's retries.
    pub(crate) fn rnr_retry_exceeded(&self) -> bool {
        self.status == bindings::ib_wc_status_IB_WC_RNR_RETRY_EXC_ERR
    }
}

/// The tag of unsignaled work requests.
pub(crate) const UNSIGNALED_TAG: u32 = u32::MAX;

/// The completion of a signaled send, as [`QpHandler::send_done`] gets it.
/// It holds the send's tag: until it is released (or dropped), nothing
/// can be posted on the tag, so whatever the handler recorded for the tag
/// is the completed request's, not a later one's.
///
/// # Invariants
///
/// `tag`, when set, is held by the signaled send whose completion is
/// being handled, and nothing else releases it: only this value does,
/// once. Its command slot (`Tag::cmd`), if set, is a `CmdSlot<D>` alive
/// for `'a`.
pub(crate) struct SendDone<'a, D> {
    /// The tag, for a signaled request; `None` for an unsignaled one's
    /// error.
    pub(super) tag: Option<&'a Tag>,
    _data: PhantomData<&'a D>,
}

impl<'a, D> SendDone<'a, D> {
    /// The completion of the request last posted on `tag`.
    ///
    /// # Safety
    ///
    /// `tag`'s last work request has completed and this completion is
    /// being handled: one `SendDone` per completion (the tag is released
    /// when it goes, freeing what the request held). The tag's command
    /// slot, if set, is a `CmdSlot<D>` alive for `'a`.
    pub(super) unsafe fn new(tag: &'a Tag) -> Self {
        // INVARIANT: the caller hands over the completed request's hold,
        // and vouches for the tag's command slot.
        Self {
            tag: (tag.id != UNSIGNALED_TAG).then_some(tag),
            _data: PhantomData,
        }
    }

    /// The tag the send was posted with ([`UNSIGNALED_TAG`] for an
    /// unsignaled request).
    pub(crate) fn tag(&self) -> u32 {
        self.tag.map_or(UNSIGNALED_TAG, |t| t.id)
    }

    /// The number of work requests posted on the tag up to and including
    /// the one that completed (wrapping): what
    /// [`Connection::send_tag_posts`] said after that post.
    pub(crate) fn post(&self) -> u32 {
        self.tag.map_or(0, |t| t.posts.load(Ordering::Acquire))
    }

    /// Frees the tag for the next work request, releasing the buffer the
    /// request held.
    pub(crate) fn release(mut self) {
        if let Some(t) = self.tag.take() {
            t.release();
        }
    }
}

impl<D> Drop for SendDone<'_, D> {
    fn drop(&mut self) {
        if let Some(t) = self.tag.take() {
            t.release();
        }
    }
}

/// The completion entry of one work request slot.
///
/// # Invariants
///
/// `keep` is null, dangling (a request that keeps nothing), or came from
/// `Arc::<DmaBufs>::into_raw` and is owned by the tag until taken back.
/// `cmd` is null, or the command slot (of the connection's handler's
/// `CmdData`) whose send tag this is, set once the connection's slots are
/// installed and valid while the connection is.
#[repr(C)]
pub(super) struct Tag {
    pub(super) cqe: bindings::ib_cqe,
    pub(super) id: u32,
    pub(super) keep: AtomicPtr<DmaBufs>,
    /// Work requests held on the tag so far (wrapping); written only by
    /// the holder, after it took the tag.
    pub(super) posts: AtomicU32,
    /// The command slot this tag is the send tag of, if any.
    pub(super) cmd: AtomicPtr<c_void>,
}

/// The completion callback of a tag: ib_core calls it with the CQ and the
/// work completion.
pub(super) type DoneFn = unsafe extern "C" fn(*mut bindings::ib_cq, *mut bindings::ib_wc);

impl Tag {
    pub(super) fn new(id: u32, done: DoneFn) -> Self {
        Self {
            cqe: bindings::ib_cqe { done: Some(done) },
            id,
            keep: AtomicPtr::new(null_mut()),
            posts: AtomicU32::new(0),
            cmd: AtomicPtr::new(null_mut()),
        }
    }

    /// Whether the tag's last work request has completed (or none was
    /// posted).
    pub(super) fn idle(&self) -> bool {
        self.keep.load(Ordering::Acquire).is_null()
    }

    /// Records `buf` as used by the work request of this tag (keeping its
    /// set); `EBUSY` if the tag's previous work request has not completed.
    pub(super) fn hold(&self, buf: Option<BufRef<'_>>) -> Result {
        let p = match buf {
            Some(b) => Arc::into_raw(b.set().clone()).cast_mut(),
            None => NonNull::<DmaBufs>::dangling().as_ptr(),
        };
        if self
            .keep
            .compare_exchange(null_mut(), p, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            if buf.is_some() {
                // SAFETY: `p` came from `into_raw` just above and was not
                // stored.
                drop(unsafe { Arc::from_raw(p) });
            }
            return Err(EBUSY);
        }
        // Only the holder writes it: the tag was taken just above.
        let n = self.posts.load(Ordering::Relaxed).wrapping_add(1);
        self.posts.store(n, Ordering::Release);
        Ok(())
    }

    /// As [`Tag::hold`] with nothing to keep, for a tag that only one
    /// taker at a time may take: a load and a store where `hold` needs a
    /// locked exchange. The completion, which releases the tag, writes
    /// `keep` only while it is held, and the taker only while it is not.
    ///
    /// # Safety
    ///
    /// No other call of this or of `hold` on the tag runs meanwhile (a
    /// command slot's tag: taken only by the holder of the slot's claim).
    #[inline(always)]
    pub(super) unsafe fn hold_claimed(&self) -> Result {
        if !self.keep.load(Ordering::Acquire).is_null() {
            return Err(EBUSY);
        }
        // No other taker (function contract), and the completion does not
        // write a free tag: nothing writes `keep` between the load and this
        // store. A request that keeps nothing (`release` takes the store
        // path for it).
        self.keep
            .store(NonNull::<DmaBufs>::dangling().as_ptr(), Ordering::Relaxed);
        // Only the holder writes it: the tag was taken just above.
        let n = self.posts.load(Ordering::Relaxed).wrapping_add(1);
        self.posts.store(n, Ordering::Release);
        Ok(())
    }

    /// Ends the tag's work request, releasing what it held.
    #[inline]
    pub(super) fn release(&self) {
        // A request that keeps nothing (a command's SEND, the common
        // case): only its holder releases the tag, and a new holder takes
        // it only from null, so nothing else writes `keep` meanwhile, and
        // a store ends it, no locked exchange. (Were a tag released twice
        // at once, a bug, that store could overwrite a later holder's
        // set: leaked, never freed early.)
        let dangling = NonNull::<DmaBufs>::dangling().as_ptr();
        if self.keep.load(Ordering::Relaxed) == dangling {
            self.keep.store(null_mut(), Ordering::Release);
            return;
        }
        let p = self.keep.swap(null_mut(), Ordering::AcqRel);
        if !p.is_null() && p != NonNull::<DmaBufs>::dangling().as_ptr() {
            // SAFETY: A non-null, non-dangling `keep` came from `into_raw`
            // (type invariant) and was swapped out once.
            drop(unsafe { Arc::from_raw(p) });
        }
    }
}

/// A work request riser posts on the send queue outside a command slot
/// (a command's own requests go through [`super::CmdClaim`], which keeps
/// the same rules).
///
/// What memory a request names is borrowed for `'a`: the [`Sge`]s and
/// [`Registration`](super::Registration)s it carries cannot outlive the [`DmaBuf`](super::DmaBuf), the
/// [`DmaSg`](super::DmaSg) mapping (or the MR mapping) they were made from, so nothing
/// freed, unmapped or mapped anew is ever posted. The borrow ends when
/// [`Connection::post_send`] returns, while the device uses the memory
/// until the request completes (or the QP is destroyed). What keeps it
/// alive that long:
///
/// - A [`DmaBuf`](super::DmaBuf): the request's tag. A SEND naming a buffer must carry it
///   as `keep` (posting fails with `EINVAL` otherwise), and the tag holds a
///   reference on its set ([`super::DmaBufs`]) until the completion.
/// - SCSI data (a [`DmaSg`](super::DmaSg), entries of a [`Registration`](super::Registration)): nothing here.
///   The driver must keep the mapping (its task) until every SEND naming
///   it has completed and every registration of it given to the peer is
///   invalidated; it does so with its completion words and the task
///   reference a command holds while its response has come and these have
///   not. This is the driver's discipline, not enforced by these types.
/// - An MR registration (a command slot's REG_MR): the device reads the
///   MR's page list when it executes the REG_MR, after posting; the claim
///   may be dropped once posted, and mapping the MR anew under a later
///   claim before then is the driver's to avoid (it maps a slot's MR again
///   only for the slot's next command, once the last one has completed).
pub(crate) enum SendOp<'a> {
    /// Invalidate MR `mr`'s current registration: signaled on tag `tag`
    /// when there is one, so that its completion tells when the peer can no
    /// longer reach the memory; otherwise unsignaled.
    LocalInv {
        /// The connection's MR index.
        mr: u32,
        /// The key to invalidate: refused (`EINVAL`) unless it is the key
        /// of the MR's last posted registration.
        rkey: u32,
        /// The signaled send tag, if any.
        tag: Option<u32>,
    },
    /// A signaled SEND of `sges`, completing on tag `tag`, holding `keep`
    /// until then.
    Send {
        /// The signaled send tag.
        tag: u32,
        /// One or two entries; an entry of a [`DmaBuf`](super::DmaBuf) must be in `keep`.
        sges: &'a [Sge<'a>],
        /// The buffer kept alive (with its set) until the completion.
        keep: Option<BufRef<'a>>,
    },
    /// A signaled SEND of nothing, completing on tag `tag`. On a QP in the
    /// error state (after [`crate::rdma::cm::CmIdRef::disconnect`]) it
    /// flushes, and its completion comes after that of every work request
    /// posted, and every receive completed, before it (the marker of
    /// `ib_drain_sq`, without the wait); on a connected QP it sends an
    /// empty message.
    Marker {
        /// The signaled send tag.
        tag: u32,
    },
}

/// What a registration lets the peer do with the region.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Access {
    /// Nothing: the region serves local work requests only.
    Local,
    /// RDMA READ (the peer pulls a write's data).
    RemoteRead,
    /// RDMA WRITE (the peer pushes a read's data).
    RemoteWrite,
}
