// SPDX-License-Identifier: GPL-2.0

//! A connected iSER connection's resources: the QP, its buffers and the
//! command bookkeeping, made when the route resolves and dropped at teardown.

use super::{
    conn::IserConn,
    device::DevUse,
    memory::Cmds,
    send::Tx,
    tags::TagMap,
    LOGIN_DATA, //
};
use crate::{
    proto::{
        pdu::HEADERS_LEN,
        sizing::ConnSizing, //
    },
    rdma::{
        conn::{
            Connection,
            RecvBuf, //
        },
        DeviceRef, //
    },
};
use kernel::sync::atomic::Atomic;
use kernel::{
    prelude::*,
    sync::{
        Arc,
        Completion,
        SetOnce, //
    },
};

/// The resources of a connected iSER connection. Dropping it (after the
/// revocation that stops every fast-path user) disconnects, drains and
/// destroys the QP first, then drops the task references (so the commands
/// complete as soon as the target can reach none of their memory: the PD
/// is the connection's own, so with its one QP gone no peer can use an
/// rkey of it) and completes `quiesced`, for which `IserConn::shut`
/// waits; then the fields drop: the MRs, the PD, the CQ and the CM id
/// (`conn`), then the buffers (`tx`).
pub(super) struct Res {
    /// The commands as the target can reach them (`memory.rs`).
    pub(super) cmds: Cmds,
    pub(super) conn: Connection<IserConn>,
    /// Completed by the drop once the QP is gone and the task references
    /// are dropped.
    quiesced: Arc<Completion>,
    /// The owning connection's address, which its tracepoint events carry.
    pub(super) trace_id: usize,
    pub(super) dev: DevUse,
    pub(super) sizing: ConnSizing,
    /// The send buffers (`send.rs`).
    pub(super) tx: Tx,
    /// How many full-feature receives (tags `1..=n`) were given their
    /// buffers; set once, at bind.
    pub(super) ff_recvs: SetOnce<u32>,
    /// The first tag of a discovery session's receives
    /// (`DISCOVERY_RECVS` of them), once they were given their buffers:
    /// set before the last login request of a discovery session is sent.
    pub(super) disc_recvs: SetOnce<u32>,
    /// The full-feature receives were posted (once: a second full-feature
    /// Login Response is refused). Set by the receive path.
    pub(super) ff_posted: Atomic<bool>,
}

impl Drop for Res {
    fn drop(&mut self) {
        // Before any field: the task references the commands hold may go
        // only once the QP, the one way to the connection's PD, is gone
        // (drained: no work request outstanding, no completion to come).
        self.conn.destroy_qp();
        self.cmds.teardown();
        self.quiesced.complete_all();
    }
}

/// What a connection needs before its QP: the send buffers, the command
/// bookkeeping and the login receive's buffer.
pub(super) struct Bufs {
    pub(super) cmds: Cmds,
    pub(super) tx: Tx,
    /// Receive tag 0's buffer, for login responses: given to the
    /// connection once it is made.
    pub(super) login_rx: Option<RecvBuf>,
}

impl Bufs {
    /// The buffers of `ep`'s connection on `dev`, whose send tags `tags`
    /// numbers. The target may invalidate riser's keys (SEND_WITH_INV)
    /// when every command registers its memory (always_register).
    pub(super) fn new(
        ep: &IserConn,
        dev: &DeviceRef,
        tags: TagMap,
        signal_interval: u32,
    ) -> Result<Self> {
        Ok(Self {
            cmds: Cmds::new(
                tags.cmds,
                tags,
                ep.params.always_register,
                ep.counters.clone(),
            )?,
            tx: Tx::new(dev, tags, signal_interval)?,
            login_rx: Some(RecvBuf::new(dev, HEADERS_LEN + LOGIN_DATA)?),
        })
    }
}

impl Res {
    /// The resources of `ep`'s connection `conn`, with the buffers `b`
    /// made for it.
    pub(super) fn new(
        ep: &IserConn,
        conn: Connection<IserConn>,
        dev: DevUse,
        sizing: ConnSizing,
        b: Bufs,
    ) -> Self {
        Res {
            cmds: b.cmds,
            conn,
            quiesced: ep.quiesced.clone(),
            trace_id: crate::trace::id(ep),
            dev,
            sizing,
            tx: b.tx,
            ff_recvs: SetOnce::default(),
            disc_recvs: SetOnce::default(),
            ff_posted: Atomic::new(false),
        }
    }
}
