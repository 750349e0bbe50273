// SPDX-License-Identifier: GPL-2.0

//! What riser reads from login PDUs: the stage transition of a Login
//! Request or Response (RFC 7143, 11.12 and 11.13) and the text keys that
//! size its receive buffers (RFC 7145, 6.1: InitiatorRecvDataSegmentLength;
//! RFC 7143: MaxRecvDataSegmentLength for discovery sessions).

#![forbid(unsafe_code)]

use super::{
    pdu::Bhs,
    ProtoError, //
};

/// Login Request opcode (with the immediate bit).
pub(crate) const OP_LOGIN_REQ: u8 = 0x03;
/// Login Response opcode.
pub(crate) const OP_LOGIN_RSP: u8 = 0x23;
/// Text Request opcode.
pub(crate) const OP_TEXT_REQ: u8 = 0x04;
/// Stage number of the full feature phase.
pub(crate) const FULL_FEATURE: u8 = 3;

/// The stage fields of a login PDU's BHS.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Stage {
    /// The transit bit.
    pub(crate) transit: bool,
    /// Current stage.
    pub(crate) csg: u8,
    /// Next stage (meaningful with the transit bit).
    pub(crate) nsg: u8,
}

/// The opcode of a BHS, without the immediate bit.
pub(crate) fn opcode(bhs: &Bhs) -> u8 {
    bhs.opcode()
}

/// The stage fields of a Login Request or Response BHS, or `None` for
/// another opcode.
pub(crate) fn stage(bhs: &Bhs) -> Option<Stage> {
    let op = opcode(bhs);
    if op != OP_LOGIN_REQ && op != OP_LOGIN_RSP {
        return None;
    }
    let f = bhs.flags();
    Some(Stage {
        transit: f & 0x80 != 0,
        csg: (f >> 2) & 3,
        nsg: f & 3,
    })
}

/// Whether the PDU moves the connection to the full feature phase.
pub(crate) fn enters_full_feature(bhs: &Bhs) -> bool {
    stage(bhs).is_some_and(|s| s.transit && s.nsg == FULL_FEATURE)
}

/// Whether a Login Response reports success (status class 0).
pub(crate) fn login_ok(bhs: &Bhs) -> bool {
    opcode(bhs) == OP_LOGIN_RSP && bhs.bytes()[36] == 0
}

/// The value of `key` in a text segment (`key=value` pairs, each ended by
/// a NUL), the last one if repeated.
pub(crate) fn key<'a>(text: &'a [u8], key: &str) -> Option<&'a [u8]> {
    let mut found = None;
    for pair in text.split(|&b| b == 0) {
        let Some(eq) = pair.iter().position(|&b| b == b'=') else {
            continue;
        };
        if &pair[..eq] == key.as_bytes() {
            found = Some(&pair[eq + 1..]);
        }
    }
    found
}

/// A decimal (or 0x hexadecimal) number of a text key's value, as RFC 7143
/// section 6.1 writes them.
pub(crate) fn number(v: &[u8]) -> Option<u32> {
    let (digits, radix) = match v {
        [b'0', b'x' | b'X', rest @ ..] => (rest, 16),
        _ => (v, 10),
    };
    if digits.is_empty() || digits.len() > 10 {
        return None;
    }
    let mut n: u64 = 0;
    for &d in digits {
        let x = char::from(d).to_digit(radix)?;
        n = n * u64::from(radix) + u64::from(x);
    }
    u32::try_from(n).ok()
}

/// What the initiator declared it receives per PDU in the full feature
/// phase: InitiatorRecvDataSegmentLength (normal iSER sessions) or
/// MaxRecvDataSegmentLength (discovery), if the text declares one.
pub(crate) fn declared_recv_dsl(text: &[u8]) -> Option<u32> {
    key(text, "InitiatorRecvDataSegmentLength")
        .or_else(|| key(text, "MaxRecvDataSegmentLength"))
        .and_then(number)
}

/// Whether the text asks for a discovery session.
pub(crate) fn is_discovery(text: &[u8]) -> bool {
    key(text, "SessionType") == Some(b"Discovery")
}

/// Rewrites the text of a login request so that `key`, a number, is at most
/// `max`: the initiator declares no more than its receives hold. The result
/// goes to `out` (at least as long as `text`); returns its length, or `None`
/// when `text` needs no change (key absent, or already small enough).
pub(crate) fn clamp_key(text: &[u8], key: &str, max: u32, out: &mut [u8]) -> Option<usize> {
    let mut digits = [0u8; 10];
    let new_value = decimal(max, &mut digits);
    let mut changed = false;
    let mut len = 0;
    let mut first = true;
    for pair in text.split(|&b| b == 0) {
        if !first {
            *out.get_mut(len)? = 0;
            len += 1;
        }
        first = false;
        let value = pair
            .iter()
            .position(|&b| b == b'=')
            .filter(|&eq| &pair[..eq] == key.as_bytes())
            .map(|eq| (eq, &pair[eq + 1..]));
        let piece: &[&[u8]] = match value {
            Some((eq, v)) if number(v).is_some_and(|x| x > max) => {
                changed = true;
                &[&pair[..=eq], new_value]
            }
            _ => &[pair],
        };
        for part in piece {
            out.get_mut(len..len + part.len())?.copy_from_slice(part);
            len += part.len();
        }
    }
    changed.then_some(len)
}

/// A Login Request rewritten by [`declare_recv_limit`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RecvLimitRewrite {
    /// The BHS, its DataSegmentLength shrunk by what the text lost.
    pub(crate) bhs: Bhs,
    /// The length of the rewritten text (at the start of `out`).
    pub(crate) len: usize,
    /// The key whose value was lowered.
    pub(crate) key: &'static str,
}

/// Rewrites a Login Request so that the initiator declares it receives at
/// most `cap` data bytes per PDU, as its receive buffers hold: the
/// request's InitiatorRecvDataSegmentLength (iSER sessions) or, when that
/// needs no change, its MaxRecvDataSegmentLength (discovery) is lowered to
/// `cap`. The text goes to `out` (at least as long as `text`).
///
/// `Ok(None)` when the request needs no change. The BHS's
/// DataSegmentLength shrinks by exactly the bytes the text lost (iscsid
/// may pass padding beyond it, which stays as it was); a DataSegmentLength
/// smaller than that is refused ([`ProtoError::DataLength`]).
pub(crate) fn declare_recv_limit(
    bhs: &Bhs,
    text: &[u8],
    cap: u32,
    out: &mut [u8],
) -> Result<Option<RecvLimitRewrite>, ProtoError> {
    const KEYS: [&str; 2] = ["InitiatorRecvDataSegmentLength", "MaxRecvDataSegmentLength"];
    let Some((key, len)) = KEYS
        .iter()
        .find_map(|&k| clamp_key(text, k, cap, out).map(|n| (k, n)))
    else {
        return Ok(None);
    };
    let removed = u32::try_from(text.len() - len).map_err(|_| ProtoError::DataLength)?;
    let new = bhs
        .data_segment_length()
        .checked_sub(removed)
        .and_then(|dsl| bhs.with_data_segment_length(dsl))
        .ok_or(ProtoError::DataLength)?;
    Ok(Some(RecvLimitRewrite { bhs: new, len, key }))
}

/// `v` in decimal, written at the end of `buf`.
pub(crate) fn decimal(mut v: u32, buf: &mut [u8; 10]) -> &[u8] {
    let mut i = buf.len();
    loop {
        i -= 1;
        // CAST: a decimal digit.
        buf[i] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            return &buf[i..];
        }
    }
}

#[cfg(MODULE)]
use kernel::prelude::kunit_tests;

#[cfg_attr(MODULE, kunit_tests(riser_proto_login))]
#[cfg_attr(not(MODULE), cfg(test))]
mod tests {
    use super::*;

    use super::super::TestRng as Rng;

    /// This module's draws from the shared test generator.
    trait ModRng {
        fn number(&mut self) -> u32;
    }

    impl ModRng for Rng {
        /// A number as login texts carry them: small, near the usual
        /// receive sizes, or anything.
        fn number(&mut self) -> u32 {
            match self.below(4) {
                0 => self.u32() % 1024,
                1 => 8192 + self.u32() % 8192 - 4096,
                _ => self.u32(),
            }
        }
    }

    /// A text built in a fixed buffer; what does not fit is dropped.
    struct Text {
        buf: [u8; 256],
        len: usize,
    }

    impl Text {
        fn new() -> Self {
            Self {
                buf: [0; 256],
                len: 0,
            }
        }

        fn push(&mut self, part: &[u8]) {
            if let Some(dst) = self.buf.get_mut(self.len..self.len + part.len()) {
                dst.copy_from_slice(part);
                self.len += part.len();
            }
        }

        fn bytes(&self) -> &[u8] {
            &self.buf[..self.len]
        }
    }

    /// `v` in hexadecimal (mixed case), written at the end of `buf`.
    fn hex(mut v: u32, buf: &mut [u8; 10]) -> &[u8] {
        let mut i = buf.len();
        loop {
            i -= 1;
            buf[i] = b"0123456789abcDEF"[usize::try_from(v % 16).unwrap_or(0)];
            v /= 16;
            if v == 0 {
                return &buf[i..];
            }
        }
    }

    const IRDSL: &[u8] = b"InitiatorRecvDataSegmentLength=";

    /// A login text of a few random pairs: the receive size keys with
    /// decimal or hex values, garbage values, other keys, a pair without
    /// `=`, and now and then a final NUL.
    fn random_login_text(r: &mut Rng, t: &mut Text) {
        t.len = 0;
        for i in 0..1 + r.below(5) {
            if i > 0 {
                t.push(b"\0");
            }
            let mut digits = [0u8; 10];
            match r.below(8) {
                0 | 1 => {
                    t.push(IRDSL);
                    t.push(decimal(r.number(), &mut digits));
                }
                2 => {
                    t.push(IRDSL);
                    t.push(b"0x");
                    t.push(hex(r.number(), &mut digits));
                }
                3 => {
                    t.push(b"MaxRecvDataSegmentLength=");
                    t.push(decimal(r.number(), &mut digits));
                }
                4 => t.push(b"InitiatorRecvDataSegmentLength=12a"),
                5 => t.push(b"InitiatorRecvDataSegmentLength"),
                6 => t.push(b"SessionType=Discovery"),
                _ => t.push(b"HeaderDigest=None"),
            }
        }
        if r.below(2) == 0 {
            t.push(b"\0");
        }
    }

    fn bhs(op: u8, flags: u8) -> Bhs {
        let mut b = [0u8; 48];
        b[0] = op;
        b[1] = flags;
        Bhs(b)
    }

    #[test]
    fn stage_fields_decode() {
        // Immediate bit, T=1, CSG=1 (operational), NSG=3 (full feature).
        let b = bhs(0x40 | OP_LOGIN_REQ, 0x80 | (1 << 2) | 3);
        assert_eq!(
            stage(&b),
            Some(Stage {
                transit: true,
                csg: 1,
                nsg: 3
            })
        );
        assert!(enters_full_feature(&b));
        // No transit: stays in its stage whatever NSG says.
        assert!(!enters_full_feature(&bhs(OP_LOGIN_REQ, (1 << 2) | 3)));
        // Security to operational.
        assert!(!enters_full_feature(&bhs(OP_LOGIN_RSP, 0x80 | 1)));
        // Not a login PDU.
        assert_eq!(stage(&bhs(OP_TEXT_REQ, 0x80 | 3)), None);
    }

    #[test]
    fn login_status_is_read_from_byte_36() {
        let mut b = bhs(OP_LOGIN_RSP, 0x87);
        assert!(login_ok(&b));
        b.0[36] = 2; // initiator error
        assert!(!login_ok(&b));
        assert!(!login_ok(&bhs(OP_LOGIN_REQ, 0x87)));
    }

    #[test]
    fn keys_are_found_in_nul_separated_text() {
        let t = b"InitiatorName=iqn.x\0SessionType=Discovery\0MaxRecvDataSegmentLength=32768\0";
        assert_eq!(key(t, "SessionType"), Some(&b"Discovery"[..]));
        assert!(is_discovery(t));
        assert_eq!(declared_recv_dsl(t), Some(32768));
        // A key that is a prefix of another is not confused with it.
        assert_eq!(key(t, "Session"), None);
        // Missing final NUL, repeated key: the last value counts.
        let t = b"InitiatorRecvDataSegmentLength=8192\0InitiatorRecvDataSegmentLength=262144";
        assert_eq!(declared_recv_dsl(t), Some(262144));
        assert!(!is_discovery(t));
    }

    #[test]
    fn iser_key_wins_over_the_generic_one() {
        let t = b"MaxRecvDataSegmentLength=65536\0InitiatorRecvDataSegmentLength=4096\0";
        assert_eq!(declared_recv_dsl(t), Some(4096));
    }

    #[test]
    fn a_login_request_declares_no_more_than_the_receives_hold() {
        let text = b"InitiatorRecvDataSegmentLength=262144\0MaxRecvDataSegmentLength=262144\0";
        let mut bhs = Bhs([0u8; 48]);
        bhs.0[0] = OP_LOGIN_REQ;
        // DataSegmentLength 80: the 74 bytes of text and padding.
        bhs.0[7] = 80;
        let mut out = [0u8; 128];
        let r = declare_recv_limit(&bhs, text, 8192, &mut out);
        let Ok(Some(r)) = r else {
            panic!("no rewrite: {:?}", r);
        };
        assert_eq!(r.key, "InitiatorRecvDataSegmentLength");
        assert_eq!(r.len, text.len() - 2);
        assert_eq!(
            &out[..r.len],
            &b"InitiatorRecvDataSegmentLength=8192\0MaxRecvDataSegmentLength=262144\0"[..]
        );
        assert_eq!(r.bhs.data_segment_length(), 78);
        assert_eq!(r.bhs.0[..5], bhs.0[..5]);
        assert_eq!(r.bhs.0[8..], bhs.0[8..]);
        // Discovery declares MaxRecvDataSegmentLength only.
        let d = b"SessionType=Discovery\0MaxRecvDataSegmentLength=1048576\0";
        bhs.0[7] = 56;
        let r = declare_recv_limit(&bhs, d, 262144, &mut out);
        assert!(matches!(
            r,
            Ok(Some(RecvLimitRewrite {
                key: "MaxRecvDataSegmentLength",
                len: 54,
                ..
            }))
        ));
        // Within the limit: nothing to do.
        assert_eq!(
            declare_recv_limit(&bhs, b"MaxRecvDataSegmentLength=8192\0", 8192, &mut out),
            Ok(None)
        );
        // A DataSegmentLength shorter than what the rewrite removes.
        bhs.0[7] = 1;
        assert_eq!(
            declare_recv_limit(&bhs, text, 8192, &mut out),
            Err(ProtoError::DataLength)
        );
    }

    #[test]
    fn clamp_rewrites_only_a_larger_value() {
        let t = b"HeaderDigest=None\0InitiatorRecvDataSegmentLength=262144\0MaxBurstLength=1\0";
        let mut out = [0u8; 128];
        let n = clamp_key(t, "InitiatorRecvDataSegmentLength", 8192, &mut out);
        assert_eq!(n, Some(t.len() - 2));
        let want = b"HeaderDigest=None\0InitiatorRecvDataSegmentLength=8192\0MaxBurstLength=1\0";
        assert_eq!(&out[..t.len() - 2], &want[..]);
        // A value already within the limit, a hex one too, or no key: unchanged.
        assert_eq!(
            clamp_key(&want[..], "InitiatorRecvDataSegmentLength", 8192, &mut out),
            None
        );
        assert_eq!(
            clamp_key(
                b"InitiatorRecvDataSegmentLength=0x100\0",
                "InitiatorRecvDataSegmentLength",
                8192,
                &mut out
            ),
            None
        );
        assert_eq!(
            clamp_key(b"A=1\0", "InitiatorRecvDataSegmentLength", 8192, &mut out),
            None
        );
        // Hex above the limit is rewritten in decimal.
        let n = clamp_key(b"X=0x40000", "X", 8192, &mut out);
        assert_eq!(n, Some(6));
        assert_eq!(&out[..6], b"X=8192");
        // An output buffer too small is refused, not overrun.
        assert_eq!(clamp_key(b"X=100000", "X", 8192, &mut out[..3]), None);
    }

    #[test]
    fn numbers_reject_garbage_and_overflow() {
        assert_eq!(number(b"262144"), Some(262144));
        assert_eq!(number(b"0x2000"), Some(8192));
        assert_eq!(number(b""), None);
        assert_eq!(number(b"0x"), None);
        assert_eq!(number(b"12a"), None);
        assert_eq!(number(b"-1"), None);
        assert_eq!(number(b"4294967296"), None);
        assert_eq!(number(b"99999999999"), None);
        assert_eq!(
            declared_recv_dsl(b"InitiatorRecvDataSegmentLength=x\0"),
            None
        );
    }

    #[test]
    fn clamp_rewrites_exactly_the_values_above_max() {
        const KEY: &str = "InitiatorRecvDataSegmentLength";
        let mut r = Rng(0x6a09_e667_f3bc_c908);
        let mut t = Text::new();
        let mut rewritten = 0;
        for _ in 0..2000 {
            random_login_text(&mut r, &mut t);
            let text = t.bytes();
            let max = r.number();
            let too_big = |p: &[u8]| {
                p.strip_prefix(IRDSL)
                    .and_then(number)
                    .is_some_and(|x| x > max)
            };
            let needs = text.split(|&b| b == 0).any(too_big);
            // The driver's output buffer is as long as the text.
            let mut out = [0u8; 256];
            let n = clamp_key(text, KEY, max, &mut out[..text.len()]);
            assert_eq!(n.is_some(), needs);
            let Some(n) = n else {
                continue;
            };
            rewritten += 1;
            assert!(n <= text.len());
            let out = &out[..n];
            // Pair by pair: `max` in decimal where the value was larger, the
            // same bytes everywhere else.
            let mut digits = [0u8; 10];
            let want = decimal(max, &mut digits);
            assert_eq!(
                text.split(|&b| b == 0).count(),
                out.split(|&b| b == 0).count()
            );
            for (i, o) in text.split(|&b| b == 0).zip(out.split(|&b| b == 0)) {
                if too_big(i) {
                    assert_eq!(o.strip_prefix(IRDSL), Some(want));
                } else {
                    assert_eq!(i, o);
                }
            }
            if let Some(v) = declared_recv_dsl(out) {
                assert!(v <= max);
            }
            // Clamping again changes nothing; an output one byte short is
            // refused, not overrun.
            let mut again = [0u8; 256];
            assert_eq!(clamp_key(out, KEY, max, &mut again[..n]), None);
            assert_eq!(clamp_key(text, KEY, max, &mut again[..n - 1]), None);
        }
        assert!(rewritten > 200 && rewritten < 1800);
    }

    #[test]
    fn numbers_round_trip_and_refuse_garbage() {
        let mut r = Rng(0xbb67_ae85_84ca_a73b);
        for _ in 0..2000 {
            let v = r.number();
            let mut digits = [0u8; 10];
            let dec = decimal(v, &mut digits);
            assert_eq!(number(dec), Some(v));
            assert!(dec.len() == 1 || dec[0] != b'0');

            // Leading zeros, up to ten digits in all, but no more.
            let mut t = Text::new();
            t.push(&b"0000000000"[dec.len()..]);
            t.push(dec);
            assert_eq!(number(t.bytes()), Some(v));
            let mut padded = Text::new();
            padded.push(b"0");
            padded.push(t.bytes());
            assert_eq!(number(padded.bytes()), None);

            let mut t = Text::new();
            t.push(if r.below(2) == 0 { b"0x" } else { b"0X" });
            let mut hex_digits = [0u8; 10];
            t.push(hex(v, &mut hex_digits));
            assert_eq!(number(t.bytes()), Some(v));

            // One more digit: ten times the value, if that still fits.
            let mut t = Text::new();
            t.push(dec);
            t.push(b"0");
            assert_eq!(number(t.bytes()), v.checked_mul(10));

            // A character that is no digit, anywhere, spoils the number.
            let mut bad = [0u8; 10];
            bad[..dec.len()].copy_from_slice(dec);
            bad[r.below(dec.len())] = b"+- a:/x"[r.below(7)];
            assert_eq!(number(&bad[..dec.len()]), None);
        }
    }

    #[test]
    fn keys_are_the_last_pair_of_their_name() {
        const NAMES: [&[u8]; 4] = [b"A", b"B", b"AB", b"SessionType"];
        const VALUES: [&[u8]; 5] = [b"1", b"", b"Discovery", b"Normal", b"=x"];
        let mut r = Rng(0x3c6e_f372_fe94_f82b);
        let mut t = Text::new();
        for _ in 0..2000 {
            t.len = 0;
            for i in 0..r.below(7) {
                if i > 0 {
                    t.push(b"\0");
                }
                t.push(NAMES[r.below(NAMES.len())]);
                if r.below(8) != 0 {
                    t.push(b"=");
                }
                t.push(VALUES[r.below(VALUES.len())]);
            }
            let text = t.bytes();
            for (name, key_name) in [(&b"A="[..], "A"), (b"B=", "B"), (b"AB=", "AB")] {
                let last = text
                    .split(|&b| b == 0)
                    .filter_map(|p| p.strip_prefix(name))
                    .next_back();
                assert_eq!(key(text, key_name), last);
            }
            let session = text
                .split(|&b| b == 0)
                .filter_map(|p| p.strip_prefix(b"SessionType="))
                .next_back();
            assert_eq!(is_discovery(text), session == Some(&b"Discovery"[..]));
        }
    }
}
