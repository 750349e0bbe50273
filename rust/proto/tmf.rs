// SPDX-License-Identifier: GPL-2.0

//! Which commands a PDU the initiator sends ends at the target: the
//! decisions behind "no rkey outlives its command" for commands that end
//! without a SCSI Response of their own (RFC 7143 11.5, 11.14).

use super::pdu::Bhs;

/// The opcode of a Task Management Function Request.
pub(crate) const OP_TMF_REQ: u8 = 0x02;
/// The opcode of a Logout Request.
pub(crate) const OP_LOGOUT_REQ: u8 = 0x06;
/// The TMF Response code "function complete".
pub(crate) const FUNCTION_COMPLETE: u8 = 0;

/// The commands a TMF ends when the target answers "function complete".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Scope {
    /// ABORT TASK: the command whose ITT is the Referenced Task Tag.
    Task(u32),
    /// ABORT TASK SET, CLEAR TASK SET, LOGICAL UNIT RESET: every command
    /// to the LUN.
    Lun([u8; 8]),
    /// TARGET WARM RESET, TARGET COLD RESET: every command.
    All,
    /// CLEAR ACA, TASK REASSIGN and unknown functions end no command.
    Nothing,
}

impl Scope {
    /// Whether the command with wire ITT `itt` to `lun` is in the scope.
    pub(crate) fn covers(&self, itt: u32, lun: &[u8; 8]) -> bool {
        match self {
            Self::Task(rtt) => *rtt == itt,
            Self::Lun(l) => l == lun,
            Self::All => true,
            Self::Nothing => false,
        }
    }
}

/// A TMF request as sent: its ITT and what it covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TmfRequest {
    /// The request's ITT, which its response carries.
    pub(crate) itt: u32,
    /// The commands it ends.
    pub(crate) scope: Scope,
}

/// The TMF request a BHS holds, or `None` for another opcode.
pub(crate) fn tmf_request(bhs: &Bhs) -> Option<TmfRequest> {
    if bhs.opcode() != OP_TMF_REQ {
        return None;
    }
    let scope = match bhs.flags() & 0x7f {
        1 => Scope::Task(bhs.be32(20)),
        2 | 4 | 5 => Scope::Lun(bhs.lun()),
        6 | 7 => Scope::All,
        _ => Scope::Nothing,
    };
    Some(TmfRequest {
        itt: bhs.itt(),
        scope,
    })
}

/// The response code of a TMF Response BHS.
pub(crate) fn tmf_response(bhs: &Bhs) -> u8 {
    bhs.bytes()[2]
}

/// Whether a BHS is a Logout Request.
pub(crate) fn is_logout_request(bhs: &Bhs) -> bool {
    bhs.opcode() == OP_LOGOUT_REQ
}

#[cfg(MODULE)]
use kernel::prelude::kunit_tests;

// In the kernel the tests are a KUnit suite; built as a host crate
// (tests/host) they run under `cargo test`.
#[cfg_attr(MODULE, kunit_tests(riser_proto_tmf))]
#[cfg_attr(not(MODULE), cfg(test))]
mod tests {
    use super::*;

    fn tmf(function: u8, lun: [u8; 8], itt: u32, rtt: u32) -> Bhs {
        let mut b = Bhs([0u8; 48]);
        // Immediate bit set, as libiscsi sends TMFs.
        b.0[0] = 0x40 | OP_TMF_REQ;
        b.0[1] = 0x80 | function;
        b.0[8..16].copy_from_slice(&lun);
        b.0[16..20].copy_from_slice(&itt.to_be_bytes());
        b.0[20..24].copy_from_slice(&rtt.to_be_bytes());
        b
    }

    const L1: [u8; 8] = [0, 1, 0, 0, 0, 0, 0, 0];
    const L2: [u8; 8] = [0, 2, 0, 0, 0, 0, 0, 0];

    #[test]
    fn abort_task_covers_the_referenced_command_only() {
        let r = tmf_request(&tmf(1, L1, 0x77, 0x1234)).expect("a TMF");
        assert_eq!(r.itt, 0x77);
        assert_eq!(r.scope, Scope::Task(0x1234));
        assert!(r.scope.covers(0x1234, &L2));
        assert!(!r.scope.covers(0x1235, &L1));
    }

    #[test]
    fn lun_functions_cover_that_lun() {
        for f in [2, 4, 5] {
            let r = tmf_request(&tmf(f, L1, 1, 0xffff_ffff)).expect("a TMF");
            assert_eq!(r.scope, Scope::Lun(L1));
            assert!(r.scope.covers(9, &L1));
            assert!(!r.scope.covers(9, &L2));
        }
    }

    #[test]
    fn target_resets_cover_everything_and_others_nothing() {
        for f in [6, 7] {
            assert!(tmf_request(&tmf(f, L1, 1, 0))
                .expect("a TMF")
                .scope
                .covers(5, &L2));
        }
        for f in [0, 3, 8, 9, 0x7f] {
            assert_eq!(
                tmf_request(&tmf(f, L1, 1, 5)).expect("a TMF").scope,
                Scope::Nothing
            );
        }
    }

    #[test]
    fn other_opcodes_are_not_tmfs() {
        let mut b = tmf(1, L1, 1, 2);
        b.0[0] = 0x01;
        assert!(tmf_request(&b).is_none());
        b.0[0] = 0x46;
        assert!(is_logout_request(&b));
        assert!(tmf_request(&b).is_none());
        assert_eq!(b.itt(), 1);
    }
}
