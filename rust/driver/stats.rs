// SPDX-License-Identifier: GPL-2.0

//! A connection's own counters, which `iscsiadm -m session -s` shows
//! (Documentation/observability.md).

use super::conn::IserConn;
use crate::{iscsi::CustomStats, rdma::conn::Wc};
use core::sync::atomic::{AtomicU64, Ordering};

/// A connection's counters for `iscsiadm -m session -s` (ib_iser reports
/// none). Each is counted by one path, with relaxed increments: they are
/// statistics, read while they move.
#[derive(Default)]
pub(crate) struct Counters {
    /// Completions flushed by the QP's teardown (receive and send).
    /// Completion handlers (softirq).
    pub(super) flushed: AtomicU64,
    /// Completions with an error status other than a flush. Completion
    /// handlers.
    pub(super) wc_errors: AtomicU64,
    /// Of those, the peer's receive-not-ready retries exhausted
    /// (`IB_WC_RNR_RETRY_EXC_ERR`). Completion handlers.
    pub(super) rnr_exceeded: AtomicU64,
    /// Commands refused for a full send queue (or no free send slot,
    /// Data-Out header or work request), which libiscsi requeues.
    /// `xmit_task`.
    pub(super) sq_full: AtomicU64,
    /// Async messages past the limit (the connection fails on the
    /// first). The receive path.
    pub(super) async_refused: AtomicU64,
    /// Login Requests sent (each round of the login). iscsid's send_pdu.
    pub(super) login_rounds: AtomicU64,
}

impl Counters {
    /// Counts a completion that did not succeed.
    pub(super) fn completion_failed(&self, wc: &Wc) {
        if wc.flushed() {
            self.flushed.fetch_add(1, Ordering::Relaxed);
        } else {
            self.wc_errors.fetch_add(1, Ordering::Relaxed);
            if wc.rnr_retry_exceeded() {
                self.rnr_exceeded.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

/// Writes the counters of `ep`'s connection into `out`.
pub(super) fn fill(ep: &IserConn, out: &mut CustomStats<'_>) {
    let c = &ep.counters;
    let (remote, local) = ep.res().map_or((0, 0), |r| {
        (
            r.remote_invs.load(Ordering::Relaxed),
            r.local_invs.load(Ordering::Relaxed),
        )
    });
    for (name, v) in [
        (c"rnr_retry_exceeded", &c.rnr_exceeded),
        (c"completions_flushed", &c.flushed),
        (c"completion_errors", &c.wc_errors),
        (c"send_queue_full", &c.sq_full),
        (c"unregistered_cmds", &ep.unreg_cmds),
        (c"async_msgs_refused", &c.async_refused),
        (c"login_rounds", &c.login_rounds),
    ] {
        out.push(name, v.load(Ordering::Relaxed));
    }
    out.push(c"remote_invalidations", remote);
    out.push(c"local_invalidations", local);
}
