// SPDX-License-Identifier: GPL-2.0

//! The iSER wire headers of RFC 7145: the 28-byte iSER header that leads every
//! iSER SEND, and the 4-byte iSER header carried in the RDMA CM private data.
//!
//! Both are parsed from and written to plain byte slices. Decoding is strict:
//! a short buffer, an opcode this initiator does not speak, or a reserved bit
//! that is set is an error, because the bytes come from a target that may be
//! broken or hostile.

use super::ProtoError;
#[cfg(MODULE)]
use kernel::prelude::kunit_tests;

/// Length in bytes of the iSER header (RFC 7145, section 9.2).
pub(crate) const ISER_HDR_LEN: usize = 28;

/// Length in bytes of the iSER CM private data header (RFC 7145, section 9.1).
pub(crate) const ISER_CM_HDR_LEN: usize = 4;

/// Opcode of an iSCSI control-type PDU, in the high nibble of byte 0.
const OPCODE_ISCSI_CTRL: u8 = 0x1;

/// Write STag valid: the write STag and base offset describe initiator memory
/// the target may RDMA READ.
const FLAG_WSV: u8 = 0x08;
/// Read STag valid: the read STag and base offset describe initiator memory
/// the target may RDMA WRITE.
const FLAG_RSV: u8 = 0x04;
/// The bits of byte 0 below the W and R flags are reserved.
const FLAGS_RESERVED: u8 = 0x03;

/// One remote buffer advertised to the target: an STag (the rkey of a memory
/// region) and the base virtual address the target must use with it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct StagVa {
    /// The steering tag (rkey).
    pub(crate) stag: u32,
    /// The tagged base offset (virtual address) of the buffer.
    pub(crate) va: u64,
}

/// The iSER header of an iSCSI control-type PDU.
///
/// `write` is present when the W bit is set (the target may RDMA READ the
/// initiator's write data), `read` when the R bit is set (the target may RDMA
/// WRITE read data). A header with neither describes a PDU that moves no data
/// with RDMA (a response, a NOP, a login PDU).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct IserHeader {
    /// The write STag and base offset, when valid.
    pub(crate) write: Option<StagVa>,
    /// The read STag and base offset, when valid.
    pub(crate) read: Option<StagVa>,
}

fn be32(b: &[u8], at: usize) -> u32 {
    let mut w = [0u8; 4];
    w.copy_from_slice(&b[at..at + 4]);
    u32::from_be_bytes(w)
}

fn be64(b: &[u8], at: usize) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&b[at..at + 8]);
    u64::from_be_bytes(w)
}

impl IserHeader {
    /// Writes the header into the first [`ISER_HDR_LEN`] bytes of `out`.
    ///
    /// STag and base offset fields whose flag is clear are written as zero, as
    /// RFC 7145 requires.
    pub(crate) fn encode(&self, out: &mut [u8]) -> Result<(), ProtoError> {
        let out = out.get_mut(..ISER_HDR_LEN).ok_or(ProtoError::Short)?;
        let mut flags = OPCODE_ISCSI_CTRL << 4;
        let w = self.write.unwrap_or_default();
        let r = self.read.unwrap_or_default();
        if self.write.is_some() {
            flags |= FLAG_WSV;
        }
        if self.read.is_some() {
            flags |= FLAG_RSV;
        }
        out[0] = flags;
        out[1..4].fill(0);
        out[4..8].copy_from_slice(&w.stag.to_be_bytes());
        out[8..16].copy_from_slice(&w.va.to_be_bytes());
        out[16..20].copy_from_slice(&r.stag.to_be_bytes());
        out[20..28].copy_from_slice(&r.va.to_be_bytes());
        Ok(())
    }

    /// The first four bytes of a control header that carries no STag: the
    /// header every PDU from a target has (its STag fields then unread).
    pub(crate) const PLAIN_CONTROL: [u8; 4] = [OPCODE_ISCSI_CTRL << 4, 0, 0, 0];

    /// Parses the header at the start of `buf`.
    ///
    /// Fails with [`ProtoError::Short`] when `buf` holds fewer than
    /// [`ISER_HDR_LEN`] bytes, [`ProtoError::Opcode`] for a Hello, HelloReply
    /// or unknown opcode, and [`ProtoError::Reserved`] when a reserved bit is
    /// set.
    pub(crate) fn decode(buf: &[u8]) -> Result<Self, ProtoError> {
        let b = buf.get(..ISER_HDR_LEN).ok_or(ProtoError::Short)?;
        let opcode = b[0] >> 4;
        // Hello and HelloReply (opcodes 2 and 3) are never sent by Linux
        // targets, which skip the iSER Hello exchange; like any other opcode
        // but a control-type PDU they are refused.
        if opcode != OPCODE_ISCSI_CTRL {
            return Err(ProtoError::Opcode(opcode));
        }
        if b[0] & FLAGS_RESERVED != 0 || b[1..4].iter().any(|&x| x != 0) {
            return Err(ProtoError::Reserved);
        }
        let field = |valid: bool, at: usize| {
            valid.then(|| StagVa {
                stag: be32(b, at),
                va: be64(b, at + 4),
            })
        };
        Ok(Self {
            write: field(b[0] & FLAG_WSV != 0, 4),
            read: field(b[0] & FLAG_RSV != 0, 16),
        })
    }
}

/// The iSER header in the RDMA CM private data of the connection request
/// (initiator to target) and reply (target to initiator).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct CmHeader {
    /// Z bit: in a request, the initiator does not support zero-based virtual
    /// addresses; in a reply, the target will not use them.
    pub(crate) zbva_not_supported: bool,
    /// I bit: in a request, the initiator does not support Send with
    /// Invalidate; in a reply, the target will not use it.
    pub(crate) send_w_inv_not_supported: bool,
}

const CM_FLAG_ZBVA_NOT_SUP: u8 = 0x80;
const CM_FLAG_SEND_W_INV_NOT_SUP: u8 = 0x40;
const CM_FLAGS_RESERVED: u8 = !(CM_FLAG_ZBVA_NOT_SUP | CM_FLAG_SEND_W_INV_NOT_SUP);

impl CmHeader {
    /// Writes the header into the first [`ISER_CM_HDR_LEN`] bytes of `out`.
    pub(crate) fn encode(&self, out: &mut [u8]) -> Result<(), ProtoError> {
        let out = out.get_mut(..ISER_CM_HDR_LEN).ok_or(ProtoError::Short)?;
        let mut flags = 0;
        if self.zbva_not_supported {
            flags |= CM_FLAG_ZBVA_NOT_SUP;
        }
        if self.send_w_inv_not_supported {
            flags |= CM_FLAG_SEND_W_INV_NOT_SUP;
        }
        out[0] = flags;
        out[1..4].fill(0);
        Ok(())
    }

    /// Whether a target's CM reply (`buf`, its private data) says it will
    /// not send with invalidate (the I bit), read as ib_iser reads it: the
    /// flags byte alone, whatever the reserved bits hold. `None` when the
    /// reply carries no header.
    pub(crate) fn refuses_send_w_inv(buf: &[u8]) -> Option<bool> {
        buf.first().map(|f| f & CM_FLAG_SEND_W_INV_NOT_SUP != 0)
    }

    /// Parses the header at the start of CM private data.
    ///
    /// The private data of a CM message is usually longer than the header
    /// (the transport pads it); only the first four bytes are read.
    pub(crate) fn decode(buf: &[u8]) -> Result<Self, ProtoError> {
        let b = buf.get(..ISER_CM_HDR_LEN).ok_or(ProtoError::Short)?;
        if b[0] & CM_FLAGS_RESERVED != 0 || b[1..4].iter().any(|&x| x != 0) {
            return Err(ProtoError::Reserved);
        }
        Ok(Self {
            zbva_not_supported: b[0] & CM_FLAG_ZBVA_NOT_SUP != 0,
            send_w_inv_not_supported: b[0] & CM_FLAG_SEND_W_INV_NOT_SUP != 0,
        })
    }
}

// In the kernel the tests are a KUnit suite; built as a host crate
// (tests/host) they run under `cargo test`.
#[cfg_attr(MODULE, kunit_tests(riser_proto_iser))]
#[cfg_attr(not(MODULE), cfg(test))]
mod tests {
    use super::*;

    use super::super::TestRng as Rng;

    /// This module's draws from the shared test generator.
    trait ModRng {
        fn byte(&mut self) -> u8;
        fn stag_va(&mut self) -> Option<StagVa>;
    }

    impl ModRng for Rng {
        fn byte(&mut self) -> u8 {
            self.u64().to_le_bytes()[7]
        }

        fn stag_va(&mut self) -> Option<StagVa> {
            let v = StagVa {
                stag: self.u32(),
                va: self.u64(),
            };
            (self.byte() & 1 != 0).then_some(v)
        }
    }

    const W: StagVa = StagVa {
        stag: 0x1234_5678,
        va: 0x0102_0304_0506_0708,
    };
    const R: StagVa = StagVa {
        stag: 0xdead_beef,
        va: 0xffff_8880_0000_1000,
    };

    /// Encodes `h` into a buffer prefilled with a non-zero pattern, so that a
    /// field the encoder forgot to write shows up.
    fn encoded(h: &IserHeader) -> Result<[u8; ISER_HDR_LEN], ProtoError> {
        let mut b = [0xaau8; ISER_HDR_LEN];
        h.encode(&mut b)?;
        Ok(b)
    }

    #[test]
    fn header_round_trips_every_flag_combination() -> Result<(), ProtoError> {
        for write in [None, Some(W)] {
            for read in [None, Some(R)] {
                let h = IserHeader { write, read };
                assert_eq!(IserHeader::decode(&encoded(&h)?), Ok(h));
            }
        }
        Ok(())
    }

    #[test]
    fn header_wire_layout_matches_rfc7145() -> Result<(), ProtoError> {
        let b = encoded(&IserHeader {
            write: Some(W),
            read: Some(R),
        })?;
        assert_eq!(b[0], 0x1c);
        assert_eq!(&b[1..4], &[0, 0, 0]);
        assert_eq!(&b[4..8], &[0x12, 0x34, 0x56, 0x78]);
        assert_eq!(&b[8..16], &[1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(&b[16..20], &[0xde, 0xad, 0xbe, 0xef]);
        assert_eq!(&b[20..28], &[0xff, 0xff, 0x88, 0x80, 0, 0, 0x10, 0]);

        // Fields whose flag is clear go out as zero, whatever the buffer held.
        let b = encoded(&IserHeader::default())?;
        assert_eq!(b[0], 0x10);
        assert!(b[1..].iter().all(|&x| x == 0));
        Ok(())
    }

    #[test]
    fn header_ignores_trailing_bytes() {
        let h = IserHeader {
            write: None,
            read: Some(R),
        };
        let mut b = [0u8; ISER_HDR_LEN + 48];
        assert_eq!(h.encode(&mut b), Ok(()));
        b[ISER_HDR_LEN..].fill(0x5a);
        assert_eq!(IserHeader::decode(&b), Ok(h));
    }

    #[test]
    fn header_rejects_short_input() -> Result<(), ProtoError> {
        let b = encoded(&IserHeader::default())?;
        for len in 0..ISER_HDR_LEN {
            assert_eq!(IserHeader::decode(&b[..len]), Err(ProtoError::Short));
        }
        let mut small = [0u8; ISER_HDR_LEN - 1];
        assert_eq!(
            IserHeader::default().encode(&mut small),
            Err(ProtoError::Short)
        );
        Ok(())
    }

    #[test]
    fn header_rejects_other_opcodes() -> Result<(), ProtoError> {
        for opcode in (0u8..16).filter(|&o| o != 1) {
            let mut b = encoded(&IserHeader::default())?;
            b[0] = opcode << 4;
            assert_eq!(IserHeader::decode(&b), Err(ProtoError::Opcode(opcode)));
        }
        Ok(())
    }

    #[test]
    fn header_rejects_reserved_bits() -> Result<(), ProtoError> {
        let good = encoded(&IserHeader {
            write: Some(W),
            read: None,
        })?;
        for bit in [0x01u8, 0x02] {
            let mut b = good;
            b[0] |= bit;
            assert_eq!(IserHeader::decode(&b), Err(ProtoError::Reserved));
        }
        for at in 1..4 {
            for bit in 0..8 {
                let mut b = good;
                b[at] = 1 << bit;
                assert_eq!(IserHeader::decode(&b), Err(ProtoError::Reserved));
            }
        }
        Ok(())
    }

    #[test]
    fn header_decodes_garbage_without_panic() -> Result<(), ProtoError> {
        // A deterministic walk over many byte patterns: every outcome must be
        // a value or an error, and every accepted value must re-encode to the
        // same flags byte.
        let mut x: u32 = 0x9e37_79b9;
        for _ in 0..4096 {
            let mut b = [0u8; ISER_HDR_LEN];
            for byte in b.iter_mut() {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                *byte = x.to_le_bytes()[0];
            }
            if let Ok(h) = IserHeader::decode(&b) {
                assert_eq!(encoded(&h)?[0], b[0]);
            }
        }
        Ok(())
    }

    #[test]
    fn cm_header_round_trips() {
        for z in [false, true] {
            for i in [false, true] {
                let h = CmHeader {
                    zbva_not_supported: z,
                    send_w_inv_not_supported: i,
                };
                let mut b = [0xffu8; ISER_CM_HDR_LEN];
                assert_eq!(h.encode(&mut b), Ok(()));
                assert_eq!(CmHeader::decode(&b), Ok(h));
            }
        }
    }

    #[test]
    fn cm_header_wire_layout() {
        let mut b = [0u8; 56];
        let h = CmHeader {
            zbva_not_supported: true,
            send_w_inv_not_supported: true,
        };
        assert_eq!(h.encode(&mut b), Ok(()));
        assert_eq!(&b[..4], &[0xc0, 0, 0, 0]);
        // Padded private data, as the CM delivers it, decodes the same.
        assert_eq!(CmHeader::decode(&b), Ok(h));
    }

    #[test]
    fn cm_header_rejects_short_and_reserved() {
        for len in 0..ISER_CM_HDR_LEN {
            assert_eq!(CmHeader::decode(&[0u8; 4][..len]), Err(ProtoError::Short));
        }
        for bit in 0..6 {
            assert_eq!(
                CmHeader::decode(&[1 << bit, 0, 0, 0]),
                Err(ProtoError::Reserved)
            );
        }
        for at in 1..4 {
            let mut b = [0u8; 4];
            b[at] = 0x80;
            assert_eq!(CmHeader::decode(&b), Err(ProtoError::Reserved));
        }
    }

    #[test]
    fn a_target_s_refusal_of_send_with_invalidate_is_read_from_its_flags_alone() {
        // The I bit, whatever else the reply holds (as ib_iser reads it).
        assert_eq!(CmHeader::refuses_send_w_inv(&[0x40]), Some(true));
        assert_eq!(CmHeader::refuses_send_w_inv(&[0xc0, 0, 0, 0]), Some(true));
        assert_eq!(
            CmHeader::refuses_send_w_inv(&[0x7f, 0xff, 0xff]),
            Some(true)
        );
        assert_eq!(
            CmHeader::refuses_send_w_inv(&[0xbf, 0xff, 0xff, 0xff]),
            Some(false)
        );
        assert_eq!(CmHeader::refuses_send_w_inv(&[0x80, 0, 0, 0]), Some(false));
        assert_eq!(CmHeader::refuses_send_w_inv(&[]), None);
    }

    #[test]
    fn random_headers_round_trip() {
        let mut r = Rng(0x853c_49e6_748f_ea9b);
        for _ in 0..2000 {
            let h = IserHeader {
                write: r.stag_va(),
                read: r.stag_va(),
            };
            // Prefilled: the encoder must write every header byte and no
            // byte past the header.
            let fill = r.byte();
            let mut b = [fill; ISER_HDR_LEN + 12];
            assert_eq!(h.encode(&mut b), Ok(()));
            assert_eq!(IserHeader::decode(&b), Ok(h));
            assert!(b[ISER_HDR_LEN..].iter().all(|&x| x == fill));
            let w = if h.write.is_some() { FLAG_WSV } else { 0 };
            let rd = if h.read.is_some() { FLAG_RSV } else { 0 };
            assert_eq!(b[0], 0x10 | w | rd);
            if h.write.is_none() {
                assert!(b[4..16].iter().all(|&x| x == 0));
            }
            if h.read.is_none() {
                assert!(b[16..28].iter().all(|&x| x == 0));
            }

            let c = CmHeader {
                zbva_not_supported: r.byte() & 1 != 0,
                send_w_inv_not_supported: r.byte() & 1 != 0,
            };
            let mut b = [fill; ISER_CM_HDR_LEN + 4];
            assert_eq!(c.encode(&mut b), Ok(()));
            assert_eq!(CmHeader::decode(&b), Ok(c));
            assert!(b[ISER_CM_HDR_LEN..].iter().all(|&x| x == fill));
        }
    }

    #[test]
    fn random_bytes_decode_exactly_when_valid() {
        let mut r = Rng(0xda3e_39cb_94b9_5bdb);
        let (mut accepted, mut cm_accepted) = (0, 0);
        for _ in 0..2000 {
            let mut b = [0u8; ISER_HDR_LEN];
            for byte in b.iter_mut() {
                *byte = r.byte();
            }
            // Mostly the control opcode and zero reserved bytes, so that
            // both outcomes come up.
            if r.byte() < 200 {
                let low = if r.byte() < 192 { 0x0c } else { 0x0f };
                b[0] = 0x10 | (b[0] & low);
                b[1..4].fill(0);
                if r.byte() < 64 {
                    b[1 + usize::from(r.byte() % 3)] = 1;
                }
            }
            let valid = b[0] & 0xf3 == 0x10 && b[1..4] == [0, 0, 0];
            match IserHeader::decode(&b) {
                Ok(h) => {
                    accepted += 1;
                    assert!(valid);
                    let mut e = [0xffu8; ISER_HDR_LEN];
                    assert_eq!(h.encode(&mut e), Ok(()));
                    // The wire bytes come back, but for the fields of clear
                    // flags, which go out as zero.
                    assert_eq!(e[..4], b[..4]);
                    let w = if h.write.is_some() {
                        &b[4..16]
                    } else {
                        &[0; 12]
                    };
                    let rd = if h.read.is_some() {
                        &b[16..28]
                    } else {
                        &[0; 12]
                    };
                    assert_eq!(&e[4..16], w);
                    assert_eq!(&e[16..28], rd);
                }
                Err(e) => {
                    assert!(!valid);
                    assert!(e == ProtoError::Reserved || e == ProtoError::Opcode(b[0] >> 4));
                }
            }

            // CM private data: the two flags, a reserved bit or byte now
            // and then.
            let mut b = [r.byte() & 0xc0, 0, 0, 0, r.byte()];
            if r.byte() < 64 {
                b[usize::from(r.byte() % 4)] |= 1 << (r.byte() % 6);
            }
            let cm_valid = b[0] & CM_FLAGS_RESERVED == 0 && b[1..4] == [0, 0, 0];
            match CmHeader::decode(&b) {
                Ok(c) => {
                    cm_accepted += 1;
                    assert!(cm_valid);
                    let mut e = [0xffu8; ISER_CM_HDR_LEN];
                    assert_eq!(c.encode(&mut e), Ok(()));
                    assert_eq!(e[..], b[..ISER_CM_HDR_LEN]);
                }
                Err(e) => {
                    assert!(!cm_valid);
                    assert_eq!(e, ProtoError::Reserved);
                }
            }
        }
        assert!(accepted > 200 && accepted < 1800);
        assert!(cm_accepted > 200 && cm_accepted < 1800);
    }
}
