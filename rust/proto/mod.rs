// SPDX-License-Identifier: GPL-2.0

//! The pure protocol layer: iSER wire formats, with no `unsafe` and no kernel
//! object. Everything here works on byte slices and plain values, so it is
//! unit-tested with KUnit and can be fuzzed as a host crate.

#![forbid(unsafe_code)]

pub(crate) mod iser;
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
}
