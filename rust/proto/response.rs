// SPDX-License-Identifier: GPL-2.0

//! Whose a response from the target is: a SCSI Response's ITT against the
//! command its task slot holds, and a TMF Response against the one TMF
//! outstanding. Which rkey a response may invalidate is the slot word's
//! to decide (`slot::response`). An answer that is not "the command's own"
//! fails the connection; none lets a response end a command while the
//! target can still reach its memory.

use super::tmf::TmfRequest;

/// The bits of an ITT, in libiscsi's host order, that libiscsi reads: the
/// task index (bits 0-12, `ISCSI_ITT_MASK`) and the session age (bits
/// 28-31, `ISCSI_AGE_MASK`). It ignores bits 13-27.
pub(crate) const ITT_SIGNIFICANT: u32 = 0xf000_1fff;

/// How the ITT of a SCSI Response compares with the one its task slot's
/// command was sent with. ITTs are as read from the wire (big-endian);
/// libiscsi builds them in host byte order and stores them unconverted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum IttMatch {
    /// The command's ITT, every bit.
    Same,
    /// The command's ITT in the bits libiscsi reads, with other bits set:
    /// libiscsi would complete the command on it, so riser must not take
    /// it for someone else's.
    Junk,
    /// Another task or session age: not this command's (libiscsi refuses
    /// it, or it names a command of an older age).
    Other,
}

/// Compares the `got` ITT of a SCSI Response with the `sent` ITT of the
/// command on the slot it names.
pub(crate) fn match_itt(sent: u32, got: u32) -> IttMatch {
    // The differing bits, in libiscsi's host order.
    let diff = u32::from_ne_bytes((sent ^ got).to_be_bytes());
    if diff == 0 {
        IttMatch::Same
    } else if diff & ITT_SIGNIFICANT == 0 {
        IttMatch::Junk
    } else {
        IttMatch::Other
    }
}

/// Whether a TMF Response with ITT `itt` answers the TMF outstanding
/// (`outstanding`). libiscsi takes a TMF Response for any live management
/// task and reports the TMF queued as done whatever ITT it carries, so
/// only the answer to the one TMF sent, once, may reach it.
pub(crate) fn answers_tmf(outstanding: Option<&TmfRequest>, itt: u32) -> bool {
    outstanding.is_some_and(|r| r.itt == itt)
}

#[cfg(MODULE)]
use kernel::prelude::kunit_tests;

#[cfg_attr(MODULE, kunit_tests(riser_proto_response))]
#[cfg_attr(not(MODULE), cfg(test))]
mod tests {
    use super::super::tmf::Scope;
    use super::*;

    /// The wire form of an ITT libiscsi built as `host` (host order).
    fn wire(host: u32) -> u32 {
        u32::from_be_bytes(host.to_ne_bytes())
    }

    #[test]
    fn the_same_itt_matches() {
        let itt = wire(0x3000_0005);
        assert_eq!(match_itt(itt, itt), IttMatch::Same);
    }

    #[test]
    fn bits_libiscsi_ignores_are_junk() {
        let sent = wire(0x3000_0005);
        for junk in [1u32 << 13, 0x00ff_e000, 0x0fff_e000, 1 << 27] {
            assert_eq!(match_itt(sent, wire(0x3000_0005 | junk)), IttMatch::Junk);
        }
    }

    #[test]
    fn another_index_or_age_is_other() {
        let sent = wire(0x3000_0005);
        assert_eq!(match_itt(sent, wire(0x3000_0006)), IttMatch::Other);
        assert_eq!(match_itt(sent, wire(0x4000_0005)), IttMatch::Other);
        // Junk beside another index is still another command's.
        assert_eq!(match_itt(sent, wire(0x30ff_e006)), IttMatch::Other);
    }

    #[test]
    fn only_the_outstanding_tmf_is_answered() {
        let req = TmfRequest {
            itt: 7,
            scope: Scope::Task(3),
        };
        assert!(answers_tmf(Some(&req), 7));
        // A ping's ITT, or any other.
        assert!(!answers_tmf(Some(&req), 8));
        // None outstanding: a second answer, or an unasked one.
        assert!(!answers_tmf(None, 7));
    }
}
