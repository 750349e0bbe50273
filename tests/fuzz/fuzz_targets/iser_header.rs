// SPDX-License-Identifier: GPL-2.0

//! Fuzzes the iSER headers of RFC 7145: `IserHeader` (every iSER SEND) and
//! `CmHeader` (the RDMA CM private data).
//!
//! The whole input is decoded as each header, and a decode succeeds exactly
//! when the buffer is long enough, carries the control opcode and has no
//! reserved bit set; an accepted header holds the wire's STags and re-encodes
//! to the same bytes (the fields of clear flags as zero). The front of the
//! input also builds a header value, which must encode into any buffer long
//! enough, touch no byte past the header, refuse a short buffer without
//! writing to it, and decode back to itself.

#![no_main]

mod common;
#[path = "../../../rust/proto.rs"]
mod proto;

use common::Input;
use libfuzzer_sys::fuzz_target;
use proto::{
    iser::{CmHeader, IserHeader, StagVa, ISER_CM_HDR_LEN, ISER_HDR_LEN},
    ProtoError,
};

const FILL: u8 = 0xa5;

fn be32(b: &[u8]) -> u32 {
    u32::from_be_bytes(b.try_into().unwrap())
}

fn be64(b: &[u8]) -> u64 {
    u64::from_be_bytes(b.try_into().unwrap())
}

fn decode_iser(data: &[u8]) {
    let h = match IserHeader::decode(data) {
        Ok(h) => h,
        Err(ProtoError::Short) => return assert!(data.len() < ISER_HDR_LEN),
        Err(ProtoError::Opcode(o)) => {
            assert!(data.len() >= ISER_HDR_LEN);
            assert_eq!(o, data[0] >> 4);
            return assert_ne!(o, 1);
        }
        Err(ProtoError::Reserved) => {
            assert!(data.len() >= ISER_HDR_LEN);
            assert_eq!(data[0] >> 4, 1);
            return assert!(data[0] & 0x03 != 0 || data[1..4] != [0, 0, 0]);
        }
        Err(e) => panic!("IserHeader::decode: {e:?}"),
    };
    assert!(data.len() >= ISER_HDR_LEN);
    assert_eq!(data[0] & 0xf3, 0x10, "opcode 1, no reserved bit");
    assert_eq!(data[1..4], [0, 0, 0]);
    assert_eq!(h.write.is_some(), data[0] & 0x08 != 0);
    assert_eq!(h.read.is_some(), data[0] & 0x04 != 0);
    if let Some(w) = h.write {
        assert_eq!((w.stag, w.va), (be32(&data[4..8]), be64(&data[8..16])));
    }
    if let Some(r) = h.read {
        assert_eq!((r.stag, r.va), (be32(&data[16..20]), be64(&data[20..28])));
    }
    // Re-encoding gives the wire bytes back, with the STag fields of clear
    // flags zeroed.
    let mut out = [FILL; ISER_HDR_LEN];
    assert_eq!(h.encode(&mut out), Ok(()));
    assert_eq!(out[..4], data[..4]);
    for (valid, at) in [(h.write.is_some(), 4), (h.read.is_some(), 16)] {
        if valid {
            assert_eq!(out[at..at + 12], data[at..at + 12]);
        } else {
            assert_eq!(out[at..at + 12], [0; 12]);
        }
    }
    assert_eq!(IserHeader::decode(&out), Ok(h));
    // Trailing bytes are ignored.
    assert_eq!(IserHeader::decode(&data[..ISER_HDR_LEN]), Ok(h));
}

fn decode_cm(data: &[u8]) {
    match CmHeader::decode(data) {
        Ok(c) => {
            assert!(data.len() >= ISER_CM_HDR_LEN);
            assert_eq!(data[0] & 0x3f, 0);
            assert_eq!(data[1..4], [0, 0, 0]);
            assert_eq!(c.zbva_not_supported, data[0] & 0x80 != 0);
            assert_eq!(c.send_w_inv_not_supported, data[0] & 0x40 != 0);
            let mut out = [FILL; ISER_CM_HDR_LEN];
            assert_eq!(c.encode(&mut out), Ok(()));
            assert_eq!(out[..], data[..ISER_CM_HDR_LEN]);
        }
        Err(ProtoError::Short) => assert!(data.len() < ISER_CM_HDR_LEN),
        Err(ProtoError::Reserved) => {
            assert!(data.len() >= ISER_CM_HDR_LEN);
            assert!(data[0] & 0x3f != 0 || data[1..4] != [0, 0, 0]);
        }
        Err(e) => panic!("CmHeader::decode: {e:?}"),
    }
}

fn round_trip_iser(input: &mut Input<'_>) {
    let flags = input.u8();
    let w = StagVa {
        stag: input.u32(),
        va: input.u64(),
    };
    let r = StagVa {
        stag: input.u32(),
        va: input.u64(),
    };
    let h = IserHeader {
        write: (flags & 1 != 0).then_some(w),
        read: (flags & 2 != 0).then_some(r),
    };
    let mut buf = [FILL; 64];
    let len = usize::from(input.u8()) % (buf.len() + 1);
    let res = h.encode(&mut buf[..len]);
    if len < ISER_HDR_LEN {
        assert_eq!(res, Err(ProtoError::Short));
        assert!(buf.iter().all(|&b| b == FILL), "a refused encode wrote");
        return;
    }
    assert_eq!(res, Ok(()));
    assert!(buf[ISER_HDR_LEN..].iter().all(|&b| b == FILL));
    let w_bit = if h.write.is_some() { 0x08 } else { 0 };
    let r_bit = if h.read.is_some() { 0x04 } else { 0 };
    assert_eq!(buf[0], 0x10 | w_bit | r_bit);
    assert_eq!(IserHeader::decode(&buf[..len]), Ok(h));
    assert_eq!(IserHeader::decode(&buf), Ok(h));
}

fn round_trip_cm(input: &mut Input<'_>) {
    let flags = input.u8();
    let c = CmHeader {
        zbva_not_supported: flags & 1 != 0,
        send_w_inv_not_supported: flags & 2 != 0,
    };
    let mut buf = [FILL; 16];
    let len = usize::from(input.u8()) % (buf.len() + 1);
    let res = c.encode(&mut buf[..len]);
    if len < ISER_CM_HDR_LEN {
        assert_eq!(res, Err(ProtoError::Short));
        assert!(buf.iter().all(|&b| b == FILL), "a refused encode wrote");
        return;
    }
    assert_eq!(res, Ok(()));
    assert!(buf[ISER_CM_HDR_LEN..].iter().all(|&b| b == FILL));
    assert_eq!(buf[1..4], [0, 0, 0]);
    assert_eq!(CmHeader::decode(&buf), Ok(c));
}

fuzz_target!(|data: &[u8]| {
    decode_iser(data);
    decode_cm(data);
    let mut input = Input::new(data);
    round_trip_iser(&mut input);
    round_trip_cm(&mut input);
});
