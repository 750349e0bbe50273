// SPDX-License-Identifier: GPL-2.0

//! Validation of what arrives in an iSER receive: the iSER header, the
//! iSCSI basic header segment (BHS) and the data segment, bounded by the
//! byte count the completion reports.
//!
//! Everything here distrusts the wire: the lengths a PDU claims are checked
//! against the bytes that really arrived before anything is handed to
//! libiscsi, so a truncated or over-long PDU ends in a clean error.

use super::{
    iser::{
        IserHeader,
        ISER_HDR_LEN, //
    },
    ProtoError, //
};
use core::ops::Range;
#[cfg(MODULE)]
use kernel::prelude::kunit_tests;

/// Length of the iSCSI basic header segment.
pub(crate) const BHS_LEN: usize = 48;

/// Bytes before the data segment of an iSER receive: the iSER header and
/// the BHS (ib_iser's ISER_HEADERS_LEN).
pub(crate) const HEADERS_LEN: usize = ISER_HDR_LEN + BHS_LEN;

/// The largest data segment a BHS can describe (24 bits).
pub(crate) const MAX_DSL: u32 = (1 << 24) - 1;

/// An iSCSI basic header segment (RFC 7143, 11.2.1), with the fields riser
/// reads. Any 48 bytes are a `Bhs`: what they mean depends on the opcode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(transparent)]
pub(crate) struct Bhs(pub(crate) [u8; BHS_LEN]);

impl Bhs {
    /// The first `BHS_LEN` bytes of `b`, if it holds that many.
    pub(crate) fn from_slice(b: &[u8]) -> Option<Self> {
        Some(Self(b.get(..BHS_LEN)?.try_into().ok()?))
    }

    /// The bytes, as on the wire.
    pub(crate) fn bytes(&self) -> &[u8; BHS_LEN] {
        &self.0
    }

    /// The opcode, without the immediate bit.
    pub(crate) fn opcode(&self) -> u8 {
        self.0[0] & 0x3f
    }

    /// The first flags byte.
    pub(crate) fn flags(&self) -> u8 {
        self.0[1]
    }

    /// The big-endian word at byte `at` (of the 48).
    pub(crate) fn be32(&self, at: usize) -> u32 {
        let w = [self.0[at], self.0[at + 1], self.0[at + 2], self.0[at + 3]];
        u32::from_be_bytes(w)
    }

    /// The Initiator Task Tag, as on the wire.
    pub(crate) fn itt(&self) -> u32 {
        self.be32(16)
    }

    /// The LUN field.
    pub(crate) fn lun(&self) -> [u8; 8] {
        let mut l = [0u8; 8];
        l.copy_from_slice(&self.0[8..16]);
        l
    }

    /// DataSegmentLength.
    pub(crate) fn data_segment_length(&self) -> u32 {
        u32::from_be_bytes([0, self.0[5], self.0[6], self.0[7]])
    }

    /// The same BHS with DataSegmentLength `n`; `None` above [`MAX_DSL`].
    pub(crate) fn with_data_segment_length(mut self, n: u32) -> Option<Self> {
        if n > MAX_DSL {
            return None;
        }
        self.0[5..8].copy_from_slice(&n.to_be_bytes()[1..]);
        Some(self)
    }
}

/// Opcodes a target sends (RFC 7143, section 11.1.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TargetOpcode {
    /// NOP-In.
    NopIn,
    /// SCSI Response.
    ScsiResponse,
    /// SCSI Task Management Function Response.
    TmfResponse,
    /// Login Response.
    LoginResponse,
    /// Text Response.
    TextResponse,
    /// SCSI Data-In: never sent over iSER, where the target RDMA-WRITEs.
    DataIn,
    /// Logout Response.
    LogoutResponse,
    /// Ready To Transfer: never sent over iSER, where the target RDMA-READs.
    R2t,
    /// Asynchronous Message.
    AsyncMessage,
    /// Reject.
    Reject,
}

impl TargetOpcode {
    /// Out of line: the common opcode (a SCSI Response) is matched before
    /// it is called.
    #[cold]
    #[inline(never)]
    fn from_wire(op: u8) -> Result<Self, ProtoError> {
        Ok(match op {
            0x20 => Self::NopIn,
            0x21 => Self::ScsiResponse,
            0x22 => Self::TmfResponse,
            0x23 => Self::LoginResponse,
            0x24 => Self::TextResponse,
            0x25 => Self::DataIn,
            0x26 => Self::LogoutResponse,
            0x31 => Self::R2t,
            0x32 => Self::AsyncMessage,
            0x3f => Self::Reject,
            other => return Err(ProtoError::IscsiOpcode(other)),
        })
    }
}

/// A received iSER message that passed validation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RxPdu {
    /// The iSCSI opcode.
    pub(crate) opcode: TargetOpcode,
    /// The BHS's second byte (F bit, response flags).
    pub(crate) flags: u8,
    /// The Initiator Task Tag, as on the wire.
    pub(crate) itt: u32,
    /// The data segment length the BHS declares.
    pub(crate) dsl: u32,
    /// Where the BHS lies in the buffer.
    pub(crate) bhs: Range<usize>,
    /// Where the data segment (without padding) lies in the buffer.
    pub(crate) data: Range<usize>,
}

/// A received PDU that passed validation ([`RxPdu::view`]), with its
/// parts borrowed from the receive buffer.
#[derive(Debug)]
pub(crate) struct RxView<'b> {
    /// What was parsed.
    pub(crate) pdu: RxPdu,
    /// The BHS (the buffer's bytes at `pdu.bhs`).
    pub(crate) bhs: &'b [u8; BHS_LEN],
    /// The data segment without padding (the buffer's bytes at
    /// `pdu.data`).
    pub(crate) data: &'b [u8],
}

impl RxPdu {
    /// Validates the first `byte_len` bytes of a receive buffer `buf`.
    ///
    /// `byte_len` is what the completion reports; it must fit in `buf`. The
    /// iSER header must be a plain control header (a target never advertises
    /// STags); the BHS must carry a target opcode and no additional header
    /// segment; the declared data segment must have arrived, followed by at
    /// most 4 bytes of padding.
    #[inline]
    pub(crate) fn parse(buf: &[u8], byte_len: usize) -> Result<Self, ProtoError> {
        Self::view(buf, byte_len).map(|v| v.pdu)
    }

    /// As [`RxPdu::parse`], with the BHS and the data segment borrowed from
    /// `buf` (taken where their bounds were just checked, so that a caller
    /// need not check them again).
    #[inline]
    pub(crate) fn view(buf: &[u8], byte_len: usize) -> Result<RxView<'_>, ProtoError> {
        let rx = buf.get(..byte_len).ok_or(ProtoError::Overrun)?;
        let Some(hdrs) = rx.first_chunk::<HEADERS_LEN>() else {
            return Err(ProtoError::Short);
        };
        // What every target sends, told by four bytes; anything else is
        // decoded to say what is wrong with it.
        if rx[..4] != IserHeader::PLAIN_CONTROL {
            let iser = IserHeader::decode(rx)?;
            if iser.write.is_some() || iser.read.is_some() {
                return Err(ProtoError::TargetStag);
            }
        }
        let bhs = ISER_HDR_LEN..HEADERS_LEN;
        let Some(b) = hdrs.last_chunk::<BHS_LEN>() else {
            return Err(ProtoError::Short);
        };
        // The common case first.
        let opcode = match b[0] & 0x3f {
            0x21 => TargetOpcode::ScsiResponse,
            op => TargetOpcode::from_wire(op)?,
        };
        if b[4] != 0 {
            return Err(ProtoError::Ahs);
        }
        let dsl = u32::from_be_bytes([0, b[5], b[6], b[7]]);
        let itt = u32::from_be_bytes([b[16], b[17], b[18], b[19]]);
        let avail = rx.len() - HEADERS_LEN;
        let want = usize::try_from(dsl).map_err(|_| ProtoError::DataLength)?;
        if want > avail || avail - want > 4 {
            return Err(ProtoError::DataLength);
        }
        let data = HEADERS_LEN..HEADERS_LEN + want;
        Ok(RxView {
            bhs: b,
            data: rx.get(data.clone()).ok_or(ProtoError::DataLength)?,
            pdu: Self {
                opcode,
                flags: b[1],
                itt,
                dsl,
                bhs,
                data,
            },
        })
    }
}

// In the kernel the tests are a KUnit suite; built as a host crate
// (tests/host) they run under `cargo test`.
#[cfg_attr(MODULE, kunit_tests(riser_proto_pdu))]
#[cfg_attr(not(MODULE), cfg(test))]
mod tests {
    use super::*;

    use super::super::TestRng as Rng;

    /// Whether `parse` must accept, from its documentation: a plain control
    /// iSER header (no W, R or reserved bit), a BHS with a target opcode and
    /// no AHS, then the declared data and at most 4 bytes of padding.
    fn acceptable(buf: &[u8], byte_len: usize) -> bool {
        let Some(rx) = buf.get(..byte_len) else {
            return false;
        };
        if rx.len() < HEADERS_LEN || rx[0] != 0x10 || rx[1..4] != [0, 0, 0] {
            return false;
        }
        let b = &rx[ISER_HDR_LEN..HEADERS_LEN];
        let target_op = matches!(b[0] & 0x3f, 0x20..=0x26 | 0x31 | 0x32 | 0x3f);
        let dsl = usize::from(b[5]) << 16 | usize::from(b[6]) << 8 | usize::from(b[7]);
        let avail = rx.len() - HEADERS_LEN;
        target_op && b[4] == 0 && dsl <= avail && avail - dsl <= 4
    }

    /// A receive of random bytes, most of them shaped like a PDU so that
    /// every check is reached, and the byte count to parse it with.
    fn random_rx(r: &mut Rng, b: &mut [u8; 192]) -> usize {
        for byte in b.iter_mut() {
            *byte = r.u64().to_le_bytes()[0];
        }
        let shape = r.below(8);
        if shape < 6 {
            b[..4].copy_from_slice(&[0x10, 0, 0, 0]);
            if shape == 0 {
                b[r.below(4)] |= 1 << r.below(8);
            }
            const OPS: [u8; 12] = [
                0x20, 0x21, 0x22, 0x23, 0x24, 0x25, 0x26, 0x31, 0x32, 0x3f, 0x01, 0x61,
            ];
            b[ISER_HDR_LEN] = OPS[r.below(OPS.len())];
            b[ISER_HDR_LEN + 4] = if shape == 1 { 1 } else { 0 };
            let dsl = r.below(110);
            b[ISER_HDR_LEN + 5] = 0;
            b[ISER_HDR_LEN + 6] = 0;
            b[ISER_HDR_LEN + 7] = dsl.to_le_bytes()[0];
            // Around the declared length: short, padded, over-padded.
            return (HEADERS_LEN + dsl + r.below(8)).saturating_sub(1);
        }
        r.below(b.len() + 4)
    }

    /// A receive buffer holding a control iSER header, a BHS with `op` and
    /// `dsl`, and `dsl` data bytes padded to four.
    fn rx(op: u8, dsl: u32, itt: u32) -> Result<([u8; 512], usize), ProtoError> {
        let mut b = [0u8; 512];
        IserHeader::default().encode(&mut b)?;
        b[ISER_HDR_LEN] = op;
        b[ISER_HDR_LEN + 1] = 0x80;
        b[ISER_HDR_LEN + 5..ISER_HDR_LEN + 8].copy_from_slice(&dsl.to_be_bytes()[1..]);
        b[ISER_HDR_LEN + 16..ISER_HDR_LEN + 20].copy_from_slice(&itt.to_be_bytes());
        let d = usize::try_from(dsl).map_err(|_| ProtoError::DataLength)?;
        Ok((b, HEADERS_LEN + d.next_multiple_of(4)))
    }

    #[test]
    fn a_bhs_reads_its_fields_where_rfc_7143_puts_them() {
        let mut b = [0u8; 60];
        b[0] = 0x40 | 0x02;
        b[1] = 0x81;
        b[5..8].copy_from_slice(&[0x01, 0x02, 0x03]);
        b[8..16].copy_from_slice(&[0, 1, 0, 0, 0, 0, 0, 0]);
        b[16..20].copy_from_slice(&0x1234_5678u32.to_be_bytes());
        let h = Bhs::from_slice(&b).expect("48 bytes");
        assert_eq!(h.opcode(), 0x02);
        assert_eq!(h.flags(), 0x81);
        assert_eq!(h.data_segment_length(), 0x01_0203);
        assert_eq!(h.lun(), [0, 1, 0, 0, 0, 0, 0, 0]);
        assert_eq!(h.itt(), 0x1234_5678);
        let h2 = h.with_data_segment_length(7).expect("fits");
        assert_eq!(h2.data_segment_length(), 7);
        assert_eq!(h2.bytes()[..5], h.bytes()[..5]);
        assert_eq!(h2.bytes()[8..], h.bytes()[8..]);
        assert_eq!(h.with_data_segment_length(MAX_DSL + 1), None);
        assert_eq!(Bhs::from_slice(&b[..47]), None);
    }

    #[test]
    fn accepts_a_scsi_response_with_sense() -> Result<(), ProtoError> {
        let (b, len) = rx(0x21, 18, 0x1234)?;
        let p = RxPdu::parse(&b, len)?;
        // The view borrows exactly the parts the ranges name.
        let v = RxPdu::view(&b, len)?;
        assert_eq!(v.pdu, p);
        assert_eq!(&v.bhs[..], &b[p.bhs.clone()]);
        assert_eq!(v.data, &b[p.data.clone()]);
        assert_eq!(p.opcode, TargetOpcode::ScsiResponse);
        assert_eq!(p.itt, 0x1234);
        assert_eq!(p.dsl, 18);
        assert_eq!(p.flags, 0x80);
        assert_eq!(p.bhs, 28..76);
        assert_eq!(p.data, 76..94);
        Ok(())
    }

    #[test]
    fn accepts_every_target_opcode_and_refuses_initiator_ones() -> Result<(), ProtoError> {
        for op in 0u8..0x40 {
            let (b, len) = rx(op, 0, 1)?;
            let known = matches!(op, 0x20..=0x26 | 0x31 | 0x32 | 0x3f);
            match RxPdu::parse(&b, len) {
                Ok(_) => assert!(known),
                Err(e) => {
                    assert!(!known);
                    assert_eq!(e, ProtoError::IscsiOpcode(op));
                }
            }
        }
        Ok(())
    }

    #[test]
    fn refuses_truncated_receives() -> Result<(), ProtoError> {
        let (b, len) = rx(0x20, 0, 7)?;
        for short in 0..len {
            assert_eq!(RxPdu::parse(&b, short), Err(ProtoError::Short));
        }
        // Data announced but not all received.
        let (b, len) = rx(0x24, 100, 7)?;
        assert_eq!(RxPdu::parse(&b, len - 4), Err(ProtoError::DataLength));
        assert_eq!(RxPdu::parse(&b, HEADERS_LEN), Err(ProtoError::DataLength));
        Ok(())
    }

    #[test]
    fn refuses_a_data_segment_longer_than_the_receive() -> Result<(), ProtoError> {
        // A NOP-In claiming the largest data segment a BHS can hold.
        let (b, _) = rx(0x20, MAX_DSL, 7)?;
        assert_eq!(RxPdu::parse(&b, b.len()), Err(ProtoError::DataLength));
        // A byte count beyond the buffer itself.
        assert_eq!(RxPdu::parse(&b, b.len() + 1), Err(ProtoError::Overrun));
        Ok(())
    }

    #[test]
    fn allows_padding_but_not_trailing_garbage() -> Result<(), ProtoError> {
        let (b, len) = rx(0x21, 5, 7)?;
        assert_eq!(len, HEADERS_LEN + 8);
        assert_eq!(RxPdu::parse(&b, HEADERS_LEN + 5)?.data, 76..81);
        assert_eq!(RxPdu::parse(&b, HEADERS_LEN + 9)?.dsl, 5);
        assert_eq!(
            RxPdu::parse(&b, HEADERS_LEN + 10),
            Err(ProtoError::DataLength)
        );
        Ok(())
    }

    #[test]
    fn refuses_stags_ahs_and_bad_iser_headers() -> Result<(), ProtoError> {
        let (mut b, len) = rx(0x21, 0, 7)?;
        b[0] |= 0x08;
        assert_eq!(RxPdu::parse(&b, len), Err(ProtoError::TargetStag));
        let (mut b, len) = rx(0x21, 0, 7)?;
        b[ISER_HDR_LEN + 4] = 1;
        assert_eq!(RxPdu::parse(&b, len), Err(ProtoError::Ahs));
        let (mut b, len) = rx(0x21, 0, 7)?;
        b[0] = 0x20;
        assert_eq!(RxPdu::parse(&b, len), Err(ProtoError::Opcode(2)));
        let (mut b, len) = rx(0x21, 0, 7)?;
        b[2] = 1;
        assert_eq!(RxPdu::parse(&b, len), Err(ProtoError::Reserved));
        Ok(())
    }

    #[test]
    fn never_panics_on_garbage() -> Result<(), ProtoError> {
        let mut x: u64 = 0x2545_f491_4f6c_dd1d;
        let mut b = [0u8; 256];
        for round in 0..2048usize {
            for byte in b.iter_mut() {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                *byte = x.to_le_bytes()[0];
            }
            // Make about half the rounds start with a valid iSER header, so
            // the BHS checks are reached too.
            if round % 2 == 0 {
                IserHeader::default().encode(&mut b)?;
            }
            let len = round % (b.len() + 2);
            if let Ok(p) = RxPdu::parse(&b, len) {
                assert!(p.data.end <= len);
                assert!(p.bhs.end <= p.data.start);
            }
        }
        Ok(())
    }

    #[test]
    fn random_receives_are_accepted_exactly_as_documented() {
        let mut r = Rng(0x9e37_79b9_7f4a_7c15);
        let mut b = [0u8; 192];
        let mut accepted = 0;
        for _ in 0..2000 {
            let len = random_rx(&mut r, &mut b);
            let got = RxPdu::parse(&b, len);
            assert_eq!(got.is_ok(), acceptable(&b, len));
            match got {
                Ok(p) => {
                    accepted += 1;
                    let bhs = &b[ISER_HDR_LEN..HEADERS_LEN];
                    assert_eq!(p.bhs, ISER_HDR_LEN..HEADERS_LEN);
                    assert_eq!(p.data.start, HEADERS_LEN);
                    assert!(p.data.end <= len && len - p.data.end <= 4);
                    assert!(p.dsl <= MAX_DSL);
                    assert_eq!(usize::try_from(p.dsl), Ok(p.data.len()));
                    assert_eq!(p.flags, bhs[1]);
                    assert_eq!(
                        p.itt,
                        u32::from_be_bytes([bhs[16], bhs[17], bhs[18], bhs[19]])
                    );
                    assert_eq!(TargetOpcode::from_wire(bhs[0] & 0x3f), Ok(p.opcode));
                }
                Err(ProtoError::Overrun) => assert!(len > b.len()),
                Err(ProtoError::Short) => assert!(len < HEADERS_LEN),
                Err(_) => assert!((HEADERS_LEN..=b.len()).contains(&len)),
            }
        }
        // The walk reaches both outcomes.
        assert!(accepted > 200 && accepted < 1800);
    }

    #[test]
    fn bytes_past_the_byte_count_do_not_matter() {
        let mut r = Rng(0x2545_f491_4f6c_dd1d);
        let mut b = [0u8; 192];
        for _ in 0..2000 {
            let len = random_rx(&mut r, &mut b).min(b.len());
            let before = RxPdu::parse(&b, len);
            for byte in b[len..].iter_mut() {
                *byte = !*byte;
            }
            assert_eq!(RxPdu::parse(&b, len), before);
            assert_eq!(RxPdu::parse(&b[..len], len), before);
        }
    }
}
