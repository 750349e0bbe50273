// SPDX-License-Identifier: GPL-2.0

//! The pure protocol layer: iSER wire formats, with no `unsafe` and no kernel
//! object. Everything here works on byte slices and plain values, so it is
//! unit-tested with KUnit and can be fuzzed as a host crate.

#![forbid(unsafe_code)]

pub(crate) mod iser;
pub(crate) mod login;
pub(crate) mod pdu;
pub(crate) mod sizing;

/// Why a buffer from the wire was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ProtoError {
    /// The buffer is shorter than the header it must hold.
    Short,
    /// The opcode is not one this initiator accepts.
    Opcode(u8),
    /// A reserved bit or field is not zero.
    Reserved,
    /// An iSCSI opcode a target may not send.
    IscsiOpcode(u8),
    /// A target's iSER header advertises a write or read STag.
    TargetStag,
    /// The PDU carries an additional header segment, which iSER responses
    /// riser accepts never have.
    Ahs,
    /// The data segment length disagrees with the bytes received.
    DataLength,
    /// The completion reports more bytes than the receive buffer holds.
    Overrun,
}
