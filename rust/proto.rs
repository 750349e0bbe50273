// SPDX-License-Identifier: GPL-2.0

//! The pure protocol layer: iSER wire formats, with no `unsafe` and no kernel
//! object. Everything here works on byte slices and plain values, so it is
//! unit-tested with KUnit and can be fuzzed as a host crate.

#![forbid(unsafe_code)]

// The host crate (tests/host) and the fuzz targets load this file by
// `#[path]`, which makes rustc look for its submodules beside it, not in
// `proto/`: for them (no `MODULE`) the paths are spelled out.
#[cfg_attr(not(MODULE), path = "proto/iser.rs")]
pub(crate) mod iser;
#[cfg_attr(not(MODULE), path = "proto/login.rs")]
pub(crate) mod login;
#[cfg_attr(not(MODULE), path = "proto/pdu.rs")]
pub(crate) mod pdu;
#[cfg_attr(not(MODULE), path = "proto/plan.rs")]
pub(crate) mod plan;
#[cfg_attr(not(MODULE), path = "proto/ratelimit.rs")]
pub(crate) mod ratelimit;
#[cfg_attr(not(MODULE), path = "proto/response.rs")]
pub(crate) mod response;
#[cfg_attr(not(MODULE), path = "proto/sizing.rs")]
pub(crate) mod sizing;
#[cfg_attr(not(MODULE), path = "proto/slot.rs")]
pub(crate) mod slot;
#[cfg_attr(not(MODULE), path = "proto/tmf.rs")]
pub(crate) mod tmf;

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

/// A xorshift64 generator with a fixed seed, for the property tests of the
/// proto modules (KUnit and cargo test): the same values every run.
#[cfg(any(MODULE, test))]
pub(crate) struct TestRng(pub(crate) u64);

#[cfg(any(MODULE, test))]
impl TestRng {
    pub(crate) fn u64(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    pub(crate) fn u32(&mut self) -> u32 {
        let b = self.u64().to_le_bytes();
        u32::from_le_bytes([b[4], b[5], b[6], b[7]])
    }

    /// A value below `n` (not zero).
    pub(crate) fn below(&mut self, n: usize) -> usize {
        usize::try_from(self.u32()).unwrap_or(0) % n
    }
}
