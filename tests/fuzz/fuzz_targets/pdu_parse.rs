// SPDX-License-Identifier: GPL-2.0

//! Fuzzes `RxPdu::parse`, the validation of every iSER receive.
//!
//! Input: a big-endian u16 `byte_len` (what the completion reports), then
//! the receive buffer. Beyond "never panics", the result is checked against
//! an independent statement of what `parse` documents: it accepts exactly a
//! plain control iSER header, a BHS with a target opcode and no AHS, and the
//! declared data segment followed by at most 4 bytes of padding, all within
//! `byte_len`; an accepted PDU's ranges lie in the received bytes and its
//! fields are the ones on the wire; a refusal names a reason that holds.

#![no_main]

mod common;
#[path = "../../../rust/proto.rs"]
mod proto;

use common::Input;
use libfuzzer_sys::fuzz_target;
use proto::{
    iser::{IserHeader, ISER_HDR_LEN},
    login,
    pdu::{RxPdu, TargetOpcode, BHS_LEN, HEADERS_LEN, MAX_DSL},
    ProtoError,
};

/// The opcodes a target may send (RFC 7143, 11.1.1), ignoring the two bits
/// above the opcode, which a receiver must ignore.
fn target_opcode(byte0: u8) -> Option<TargetOpcode> {
    Some(match byte0 & 0x3f {
        0x20 => TargetOpcode::NopIn,
        0x21 => TargetOpcode::ScsiResponse,
        0x22 => TargetOpcode::TmfResponse,
        0x23 => TargetOpcode::LoginResponse,
        0x24 => TargetOpcode::TextResponse,
        0x25 => TargetOpcode::DataIn,
        0x26 => TargetOpcode::LogoutResponse,
        0x31 => TargetOpcode::R2t,
        0x32 => TargetOpcode::AsyncMessage,
        0x3f => TargetOpcode::Reject,
        _ => return None,
    })
}

/// The data segment length a BHS declares (24 bits at bytes 5..8).
fn declared_dsl(bhs: &[u8]) -> usize {
    usize::from(bhs[5]) << 16 | usize::from(bhs[6]) << 8 | usize::from(bhs[7])
}

/// Whether `parse` must accept: written from the documentation, not the code.
fn acceptable(buf: &[u8], byte_len: usize) -> bool {
    let Some(rx) = buf.get(..byte_len) else {
        return false;
    };
    if rx.len() < ISER_HDR_LEN + BHS_LEN {
        return false;
    }
    // iSER: opcode 1 (iSCSI control), no W or R flag, reserved bits and
    // bytes zero. The STag fields of clear flags are not looked at.
    if rx[0] != 0x10 || rx[1..4] != [0, 0, 0] {
        return false;
    }
    let bhs = &rx[ISER_HDR_LEN..ISER_HDR_LEN + BHS_LEN];
    if target_opcode(bhs[0]).is_none() || bhs[4] != 0 {
        return false;
    }
    let dsl = declared_dsl(bhs);
    let avail = rx.len() - ISER_HDR_LEN - BHS_LEN;
    dsl <= avail && avail <= dsl + 4
}

fuzz_target!(|data: &[u8]| {
    let mut input = Input::new(data);
    let byte_len = usize::from(input.u16());
    let buf = input.rest();

    let got = RxPdu::parse(buf, byte_len);
    assert_eq!(got, RxPdu::parse(buf, byte_len), "parse is deterministic");
    assert_eq!(
        got.is_ok(),
        acceptable(buf, byte_len),
        "accepted {got:?} for byte_len {byte_len}, buffer of {}",
        buf.len()
    );

    let p = match got {
        Ok(p) => p,
        Err(e) => {
            check_refusal(buf, byte_len, e);
            return;
        }
    };

    // The ranges lie in what was received, in order, the data segment
    // exactly as long as declared and followed by at most 4 bytes of pad.
    assert_eq!(p.bhs, ISER_HDR_LEN..HEADERS_LEN);
    assert_eq!(p.bhs.len(), BHS_LEN);
    assert_eq!(p.data.start, HEADERS_LEN);
    assert!(p.data.end <= byte_len && byte_len <= buf.len());
    assert!(byte_len - p.data.end <= 4);
    assert!(p.dsl <= MAX_DSL);
    assert_eq!(p.data.len(), usize::try_from(p.dsl).unwrap());

    // The view the driver reads is the same PDU, its parts the ranges'.
    let v = RxPdu::view(buf, byte_len).expect("parse accepted it");
    assert_eq!(v.pdu, p);
    assert_eq!(&v.bhs[..], &buf[p.bhs.clone()]);
    assert_eq!(v.data, &buf[p.data.clone()]);

    // The fields are the wire's.
    let bhs: &[u8; 48] = buf[p.bhs.clone()].try_into().unwrap();
    assert_eq!(Some(p.opcode), target_opcode(bhs[0]));
    assert_eq!(p.flags, bhs[1]);
    assert_eq!(
        p.itt,
        u32::from_be_bytes([bhs[16], bhs[17], bhs[18], bhs[19]])
    );
    assert_eq!(usize::try_from(p.dsl).unwrap(), declared_dsl(bhs));
    assert_eq!(IserHeader::decode(buf), Ok(IserHeader::default()));

    // What the driver does next with an accepted PDU must not panic either.
    let text = &buf[p.data.clone()];
    let h = proto::pdu::Bhs(*bhs);
    assert_eq!(proto::pdu::Bhs::from_slice(&buf[p.bhs.clone()]), Some(h));
    assert_eq!(h.itt(), p.itt);
    assert_eq!(usize::try_from(h.data_segment_length()).unwrap(), declared_dsl(bhs));
    assert_eq!(login::opcode(&h), bhs[0] & 0x3f);
    let stage = login::stage(&h);
    assert_eq!(stage.is_some(), p.opcode == TargetOpcode::LoginResponse);
    if let Some(s) = stage {
        assert!(s.csg <= 3 && s.nsg <= 3);
    }
    if login::enters_full_feature(&h) {
        assert!(stage.is_some_and(|s| s.transit && s.nsg == login::FULL_FEATURE));
    }
    if login::login_ok(&h) {
        assert_eq!(p.opcode, TargetOpcode::LoginResponse);
        assert_eq!(bhs[36], 0);
    }
    let _ = login::declared_recv_dsl(text);
    let _ = login::is_discovery(text);

    // Bytes past `byte_len` do not matter.
    assert_eq!(RxPdu::parse(&buf[..byte_len], byte_len).as_ref(), Ok(&p));
    // Without its padding the PDU is the same; with five bytes of it, it is
    // refused.
    assert_eq!(RxPdu::parse(buf, p.data.end).as_ref(), Ok(&p));
    if buf.len() >= p.data.end + 5 {
        assert_eq!(
            RxPdu::parse(buf, p.data.end + 5),
            Err(ProtoError::DataLength)
        );
    }
});

/// A refusal must give a reason that holds for the buffer.
fn check_refusal(buf: &[u8], byte_len: usize, e: ProtoError) {
    if byte_len > buf.len() {
        assert_eq!(e, ProtoError::Overrun);
        return;
    }
    if byte_len < HEADERS_LEN {
        assert_eq!(e, ProtoError::Short);
        return;
    }
    let bhs = &buf[ISER_HDR_LEN..HEADERS_LEN];
    match e {
        ProtoError::Opcode(o) => assert!(o == buf[0] >> 4 && o != 1),
        ProtoError::Reserved => assert!(buf[0] & 0x03 != 0 || buf[1..4] != [0, 0, 0]),
        ProtoError::TargetStag => assert!(buf[0] & 0x0c != 0),
        ProtoError::IscsiOpcode(o) => {
            assert_eq!(o, bhs[0] & 0x3f);
            assert!(target_opcode(o).is_none());
        }
        ProtoError::Ahs => assert_ne!(bhs[4], 0),
        ProtoError::DataLength => {
            let dsl = declared_dsl(bhs);
            let avail = byte_len - HEADERS_LEN;
            assert!(dsl > avail || avail - dsl > 4);
        }
        ProtoError::Short | ProtoError::Overrun => panic!("{e:?} for a long enough buffer"),
    }
}
