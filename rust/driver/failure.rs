// SPDX-License-Identifier: GPL-2.0

//! Why riser fails a connection, as its log line says it.

use crate::proto::pdu::TargetOpcode;
use kernel::prelude::*;

/// What a path that may fail the connection returns: its value, or why
/// the connection must fail.
pub(crate) type FailResult<T = ()> = core::result::Result<T, Failure>;

/// Why riser fails a connection (hands it to iscsid's recovery): said once
/// in the log as "connection to ADDR failed: REASON".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Failure {
    /// The CM reported an address, route, reject, connect or unreachable error.
    ConnectError,
    /// The RDMA device went away.
    DeviceRemoved,
    /// The connection's port lost its link (an RDMA async event).
    PortDown,
    /// The connection's source address left its port's GID table (an
    /// RDMA async event).
    GidChanged,
    /// The RDMA device reported a fatal error.
    DeviceFatal,
    /// The QP went into the error state on its own (an RDMA async event).
    QpError,
    /// The address the connection was bound to changed.
    AddrChanged,
    /// The target closed the connection (not after a logout).
    Disconnected,
    /// The target answered one command twice.
    SecondResponse,
    /// A LOCAL_INV could not be posted: the rkey stays valid until teardown.
    InvalidatePost,
    /// A receive could not be posted again.
    RepostFailed,
    /// The target sent a PDU that does not parse.
    MalformedPdu,
    /// The target sent a Data-In or R2T, which iSER forbids.
    DataInOrR2t,
    /// The target invalidated an rkey that was not the answered task's.
    ForeignInvalidation,
    /// The target sent more async messages than the limit allows.
    AsyncFlood,
    /// A Logout Response answered no Logout Request.
    LogoutWithoutLogout,
    /// A TMF Response carried data.
    TmfWithData,
    /// A TMF Response answered no outstanding TMF (another ITT, or the
    /// TMF's a second time).
    TmfWithoutTmf,
    /// A SCSI Response carried its command's ITT with bits set that
    /// libiscsi ignores.
    CorruptItt,
    /// A SCSI Response's ITT is carried by no command posted on the
    /// connection (none yet on its task slot, another session age, or
    /// beyond the slots).
    UnknownItt,
    /// A second full-feature Login Response.
    SecondFullFeature,
    /// The full feature phase began without receive buffers.
    NoFullFeatureBuffers,
    /// The full-feature receives could not be posted.
    FullFeaturePost,
    /// libiscsi refused a PDU from the target.
    LibiscsiRejected,
    /// A receive completed with an error.
    RecvError,
    /// A send completed with an error.
    SendError,
    /// A command's registration went out and the command did not.
    CommandPost,
    /// The target answered a command whose post then failed: it never
    /// got it.
    AnsweredUnsent,
    /// A write needed more Data-Outs than were reserved for it.
    DataOutExcess,
    /// No Data-Out header was free.
    NoDataOutHeader,
    /// riser's own bookkeeping of a command refused an event (a bug).
    SlotBroken,
    /// A Data-Out could not be posted after its command.
    DataOutPost,
}

impl Failure {
    /// The reason as the log says it.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::ConnectError => "connection error",
            Self::DeviceRemoved => "RDMA device removed",
            Self::PortDown => "the RDMA port went down",
            Self::GidChanged => "its source address left the RDMA port",
            Self::DeviceFatal => "the RDMA device failed",
            Self::QpError => "the QP failed",
            Self::AddrChanged => "address changed",
            Self::Disconnected => "disconnected by the target",
            Self::SecondResponse => "second response to a command",
            Self::InvalidatePost => "cannot post a LOCAL_INV",
            Self::RepostFailed => "cannot repost a receive",
            Self::MalformedPdu => "malformed PDU",
            Self::DataInOrR2t => "Data-In or R2T over iSER",
            Self::ForeignInvalidation => "foreign remote invalidation",
            Self::AsyncFlood => "async message flood",
            Self::LogoutWithoutLogout => "Logout Response without a logout",
            Self::TmfWithData => "TMF Response with data",
            Self::TmfWithoutTmf => "TMF Response without a TMF",
            Self::CorruptItt => "SCSI Response with a corrupt ITT",
            Self::UnknownItt => "SCSI Response for no command posted",
            Self::SecondFullFeature => "second full-feature Login Response",
            Self::NoFullFeatureBuffers => "full feature phase without receive buffers",
            Self::FullFeaturePost => "cannot post the full-feature receives",
            Self::LibiscsiRejected => "libiscsi rejected a PDU",
            Self::RecvError => "receive error",
            Self::SendError => "send error",
            Self::CommandPost => "cannot post a command",
            Self::AnsweredUnsent => "SCSI Response for a command not sent",
            Self::DataOutExcess => "more Data-Outs than reserved",
            Self::NoDataOutHeader => "no Data-Out header free",
            Self::SlotBroken => "command bookkeeping broken",
            Self::DataOutPost => "cannot post a Data-Out",
        }
    }
}

impl kernel::fmt::Display for Failure {
    fn fmt(&self, f: &mut kernel::fmt::Formatter<'_>) -> kernel::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The target invalidated `rkey` with a PDU (`opcode`, for ITT `itt`)
/// whose command did not give it that key.
#[cold]
pub(super) fn foreign(rkey: u32, opcode: TargetOpcode, itt: u32) -> Failure {
    pr_err!(
        "target invalidated rkey {:#x} with a {:?} for ITT {:#x}, not that task's key\n",
        rkey,
        opcode,
        itt
    );
    Failure::ForeignInvalidation
}
