// SPDX-License-Identifier: GPL-2.0

//! Whose a response from the target is: a SCSI Response's ITT against the
//! command its task slot holds, a TMF Response against the one TMF
//! outstanding, and which rkey a response may invalidate. Each answer that
//! is not "the command's own" either goes to libiscsi, which refuses it, or
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

/// What a SCSI Response's slot says of the key a remote invalidation names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SlotKey {
    /// The response's ITT is the slot's command's, every bit.
    pub(crate) same_itt: bool,
    /// That command gave the target a key (its MR was registered for
    /// remote access and advertised), not yet invalidated.
    pub(crate) given: bool,
    /// The slot's MR's current key, if the MR is registered and valid.
    pub(crate) mr_rkey: Option<u32>,
}

/// Whether a SCSI Response may invalidate `rkey` (Send with Invalidate):
/// only when Send with Invalidate was agreed (`remote_inv`), the response
/// is the command's own, and `rkey` is the key that command gave the
/// target. A valid key the target was never given (a local-only
/// registration of an all-immediate write still on the slot's MR) is not
/// the target's to end.
pub(crate) fn may_invalidate(remote_inv: bool, slot: SlotKey, rkey: u32) -> bool {
    remote_inv && slot.same_itt && slot.given && slot.mr_rkey == Some(rkey)
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

    #[test]
    fn only_a_key_given_to_the_target_may_be_invalidated() {
        let given = SlotKey {
            same_itt: true,
            given: true,
            mr_rkey: Some(0x1234),
        };
        assert!(may_invalidate(true, given, 0x1234));
        // Send with Invalidate not agreed.
        assert!(!may_invalidate(false, given, 0x1234));
        // Another key.
        assert!(!may_invalidate(true, given, 0x1235));
        // A valid local-only key on the slot's MR (an all-immediate write
        // registered it; the target never had it).
        let local = SlotKey {
            given: false,
            ..given
        };
        assert!(!may_invalidate(true, local, 0x1234));
        // Another command's response naming this slot's key.
        let other = SlotKey {
            same_itt: false,
            ..given
        };
        assert!(!may_invalidate(true, other, 0x1234));
        // The MR is invalid already.
        let gone = SlotKey {
            mr_rkey: None,
            ..given
        };
        assert!(!may_invalidate(true, gone, 0x1234));
    }
}
