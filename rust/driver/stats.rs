// SPDX-License-Identifier: GPL-2.0

//! A connection's own counters, which `iscsiadm -m session -s` shows
//! (Documentation/observability.md).

use crate::{
    iscsi::{
        CustomStats,
        Direction, //
    },
    rdma::conn::Wc, //
};
use kernel::sync::atomic::{
    Atomic,
    Relaxed, //
};

/// Everything a connection counts: what `iscsiadm -m session -s` shows
/// (ib_iser reports none of riser's own), the data octets of its standard
/// statistics, and what its end logs. One set, shared by the connection
/// and its resources (which count the invalidations), so that it outlives
/// their revocation. Each is counted by one path, with relaxed
/// increments: they are statistics, read while they move. Those the
/// command path counts per I/O, each with one writer at a time, go up by
/// a plain load and store ([`Counters::bump`]): no locked instruction.
pub(crate) struct Counters {
    /// Completions flushed by the QP's teardown (receive and send).
    /// Completion handlers (softirq).
    pub(super) flushed: Atomic<u64>,
    /// Completions with an error status other than a flush. Completion
    /// handlers.
    pub(super) wc_errors: Atomic<u64>,
    /// Of those, the peer's receive-not-ready retries exhausted
    /// (`IB_WC_RNR_RETRY_EXC_ERR`). Completion handlers.
    pub(super) rnr_exceeded: Atomic<u64>,
    /// Commands refused for a full send queue (or no free send slot,
    /// Data-Out header or work request), which libiscsi requeues.
    /// `xmit_task`.
    pub(super) sq_full: Atomic<u64>,
    /// Async messages past the limit (the connection fails on the
    /// first). The receive path.
    pub(super) async_refused: Atomic<u64>,
    /// Login Requests sent (each round of the login). iscsid's send_pdu.
    pub(super) login_rounds: Atomic<u64>,
    /// Commands sent with an unregistered buffer (always_register=0).
    /// `xmit_task`.
    pub(super) unreg_cmds: Atomic<u64>,
    /// Registrations the target invalidated with its response. The
    /// receive path ([`Counters::bump`]).
    pub(super) remote_invs: Atomic<u64>,
    /// Registrations riser invalidated itself (LOCAL_INV) before
    /// completing their command. The receive and send paths.
    pub(super) local_invs: Atomic<u64>,
    /// SCSI data octets by the command's direction ([`Counters::octets`]):
    /// written (`Write`'s) and read (`Read`'s); the others' are counted
    /// and never shown. `xmit_task` ([`Counters::bump`]), one add with no
    /// branch on the direction.
    octets: [Atomic<u64>; 4],
    /// Text responses received (discovery). The receive path.
    pub(super) text_rsps: Atomic<u64>,
}

impl Counters {
    /// Adds `n` to `c`, a counter that one path writes at a time (a
    /// relaxed load and store, no read-modify-write): the data
    /// octets (`xmit_task`, under the session's `frwd_lock`) and
    /// `remote_invs` (the receive completions, which the CQ's poll runs
    /// one at a time). Two writers at once would only lose a count.
    #[inline]
    pub(super) fn bump(c: &Atomic<u64>, n: u64) {
        c.store(c.load(Relaxed).wrapping_add(n), Relaxed);
    }

    /// All zero.
    pub(super) const fn new() -> Self {
        Self {
            flushed: Atomic::new(0),
            wc_errors: Atomic::new(0),
            rnr_exceeded: Atomic::new(0),
            sq_full: Atomic::new(0),
            async_refused: Atomic::new(0),
            login_rounds: Atomic::new(0),
            unreg_cmds: Atomic::new(0),
            remote_invs: Atomic::new(0),
            local_invs: Atomic::new(0),
            octets: [const { Atomic::new(0) }; 4],
            text_rsps: Atomic::new(0),
        }
    }

    /// The data octets of commands of direction `d`.
    #[inline(always)]
    pub(super) fn octets(&self, d: Direction) -> &Atomic<u64> {
        // CAST: a fieldless enum's discriminant, one of its four variants.
        &self.octets[d as usize]
    }

    /// Counts a completion that did not succeed.
    pub(super) fn completion_failed(&self, wc: &Wc) {
        if wc.flushed() {
            self.flushed.add(1, Relaxed);
        } else {
            self.wc_errors.add(1, Relaxed);
            if wc.rnr_retry_exceeded() {
                self.rnr_exceeded.add(1, Relaxed);
            }
        }
    }

    /// Writes the counters into `out`.
    pub(super) fn fill(&self, out: &mut CustomStats<'_>) {
        let c = self;
        for (name, v) in [
            (c"rnr_retry_exceeded", &c.rnr_exceeded),
            (c"completions_flushed", &c.flushed),
            (c"completion_errors", &c.wc_errors),
            (c"send_queue_full", &c.sq_full),
            (c"unregistered_cmds", &c.unreg_cmds),
            (c"async_msgs_refused", &c.async_refused),
            (c"login_rounds", &c.login_rounds),
            (c"remote_invalidations", &c.remote_invs),
            (c"local_invalidations", &c.local_invs),
        ] {
            out.push(name, v.load(Relaxed));
        }
    }
}
