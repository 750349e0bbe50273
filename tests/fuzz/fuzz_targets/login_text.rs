// SPDX-License-Identifier: GPL-2.0

//! Fuzzes what riser reads and rewrites in login PDUs: the BHS stage fields
//! and the `key=value` text (`key`, `number`, `declared_recv_dsl`,
//! `is_discovery`, `decimal`, `clamp_key` and `declare_recv_limit`).
//!
//! Input: a 48-byte BHS, a key selector, a big-endian u32 `max`, an output
//! length selector, then the text. Each function is checked against the
//! text's own meaning: `key` finds the last `key=` pair, `number` agrees with
//! the standard library's parser on RFC 7143 numbers, and `clamp_key`
//! (which the driver calls with an output as long as the text) never
//! lengthens the text, rewrites exactly the pairs of `key` whose number is
//! above `max`, to `max` in decimal, keeps every other pair byte for byte,
//! and fails only when nothing needs a change or the output is too small.

#![no_main]

mod common;
#[path = "../../../rust/proto.rs"]
mod proto;

use common::Input;
use libfuzzer_sys::fuzz_target;
use proto::{login, pdu::Bhs};

const IRDSL: &str = "InitiatorRecvDataSegmentLength";
const MRDSL: &str = "MaxRecvDataSegmentLength";
/// Keys to look up; none holds `=` or NUL, as a real key cannot.
const KEYS: [&str; 6] = [IRDSL, MRDSL, "SessionType", "X", "", "HeaderDigest"];

/// RFC 7143 numbers as the standard library parses them: 1 to 10 decimal
/// digits, or `0x`/`0X` and 1 to 10 hex digits, fitting in a u32.
fn number_oracle(v: &[u8]) -> Option<u32> {
    let (digits, radix) = match v {
        [b'0', b'x' | b'X', rest @ ..] => (rest, 16),
        _ => (v, 10),
    };
    let ok = |&d: &u8| {
        if radix == 16 {
            d.is_ascii_hexdigit()
        } else {
            d.is_ascii_digit()
        }
    };
    if digits.is_empty() || digits.len() > 10 || !digits.iter().all(ok) {
        return None;
    }
    u32::from_str_radix(core::str::from_utf8(digits).ok()?, radix).ok()
}

/// The value of a `key=value` pair whose key is `key`.
fn value_of<'a>(pair: &'a [u8], key: &str) -> Option<&'a [u8]> {
    pair.strip_prefix(key.as_bytes())?.strip_prefix(b"=")
}

fn check_bhs(raw: &[u8; 48]) {
    let bhs = &Bhs(*raw);
    let op = login::opcode(bhs);
    assert_eq!(op, raw[0] & 0x3f);
    let stage = login::stage(bhs);
    assert_eq!(
        stage.is_some(),
        op == login::OP_LOGIN_REQ || op == login::OP_LOGIN_RSP
    );
    if let Some(s) = stage {
        assert_eq!(s.transit, raw[1] & 0x80 != 0);
        assert_eq!((s.csg, s.nsg), ((raw[1] >> 2) & 3, raw[1] & 3));
    }
    assert_eq!(
        login::enters_full_feature(bhs),
        stage.is_some_and(|s| s.transit && s.nsg == login::FULL_FEATURE)
    );
    assert_eq!(
        login::login_ok(bhs),
        op == login::OP_LOGIN_RSP && raw[36] == 0
    );
}

fn check_key(text: &[u8], k: &str) {
    let last = text
        .split(|&b| b == 0)
        .filter_map(|p| value_of(p, k))
        .last();
    let got = login::key(text, k);
    assert_eq!(got, last, "key {k:?}");
    if let Some(v) = got {
        // The slice is the value in place: after `k=` at the start of a
        // pair, ended by a NUL or the end of the text.
        let at = v.as_ptr() as usize - text.as_ptr() as usize;
        assert!(at > k.len() && at + v.len() <= text.len());
        let start = at - k.len() - 1;
        assert_eq!(&text[start..at - 1], k.as_bytes());
        assert_eq!(text[at - 1], b'=');
        assert!(start == 0 || text[start - 1] == 0);
        assert!(at + v.len() == text.len() || text[at + v.len()] == 0);
        assert!(!v.contains(&0));
    }
}

fn check_number(v: &[u8]) {
    assert_eq!(login::number(v), number_oracle(v), "number({v:?})");
}

fn check_clamp(text: &[u8], k: &str, max: u32, out_len: usize) {
    let mut digits = [0u8; 10];
    let new_value = login::decimal(max, &mut digits);
    assert_eq!(new_value, max.to_string().as_bytes());
    assert_eq!(login::number(new_value), Some(max));

    let too_big = |p: &&[u8]| {
        value_of(p, k)
            .and_then(login::number)
            .is_some_and(|x| x > max)
    };
    let needs = text.split(|&b| b == 0).any(|p| too_big(&p));

    let mut out = vec![0u8; out_len];
    let got = login::clamp_key(text, k, max, &mut out);
    let Some(n) = got else {
        if needs {
            // Only an output shorter than the text can be too small, and
            // then the full result must indeed not fit.
            assert!(out_len < text.len(), "clamp refused {text:?} with room");
            let mut big = vec![0u8; text.len()];
            let m = login::clamp_key(text, k, max, &mut big);
            assert!(m.is_some_and(|m| m > out_len));
        }
        return;
    };
    assert!(needs, "clamp rewrote text that needs no change");
    assert!(n <= out_len && n <= text.len(), "clamp lengthened the text");
    let out = &out[..n];
    // Pair by pair: rewritten to `k=max` where too big, else unchanged.
    let mut ins = text.split(|&b| b == 0);
    let mut outs = out.split(|&b| b == 0);
    loop {
        match (ins.next(), outs.next()) {
            (None, None) => break,
            (Some(i), Some(o)) => {
                if too_big(&i) {
                    assert_eq!(value_of(o, k), Some(new_value));
                } else {
                    assert_eq!(i, o);
                }
            }
            (i, o) => panic!("pair count changed: {i:?} vs {o:?}"),
        }
    }
    // Every number left for the key is within `max`, and clamping again
    // changes nothing.
    for p in out.split(|&b| b == 0) {
        if let Some(x) = value_of(p, k).and_then(login::number) {
            assert!(x <= max);
        }
    }
    let mut again = vec![0u8; n];
    assert_eq!(login::clamp_key(out, k, max, &mut again), None);
    if k == IRDSL {
        if let Some(x) = login::declared_recv_dsl(out) {
            assert!(x <= max);
        }
    }
}

/// `declare_recv_limit` lowers the first of the two keys that needs it,
/// exactly as `clamp_key` does, and shrinks the BHS's DataSegmentLength by
/// the bytes the text lost, touching no other BHS byte; it refuses only a
/// DataSegmentLength smaller than that.
fn check_recv_limit(raw: &[u8; 48], text: &[u8], max: u32) {
    let bhs = raw;
    let mut out = vec![0u8; text.len()];
    let got = login::declare_recv_limit(&Bhs(*raw), text, max, &mut out);
    let expected = [IRDSL, MRDSL].into_iter().find_map(|k| {
        let mut o = vec![0u8; text.len()];
        login::clamp_key(text, k, max, &mut o).map(|n| (k, n, o))
    });
    let dsl = |b: &[u8; 48]| u32::from_be_bytes([0, b[5], b[6], b[7]]);
    match (got, expected) {
        (Ok(None), None) => {}
        (Ok(Some(r)), Some((k, n, o))) => {
            assert_eq!((r.key, r.len), (k, n));
            assert_eq!(&out[..n], &o[..n]);
            assert_eq!(dsl(bhs) - dsl(&r.bhs.0), (text.len() - n) as u32);
            assert_eq!(r.bhs.0[..5], bhs[..5]);
            assert_eq!(r.bhs.0[8..], bhs[8..]);
        }
        (Err(_), Some((_, n, _))) => {
            assert!(dsl(bhs) < (text.len() - n) as u32);
        }
        (g, e) => panic!("declare_recv_limit gave {g:?}, clamp_key {:?}", e.map(|e| e.0)),
    }
}

fuzz_target!(|data: &[u8]| {
    let mut input = Input::new(data);
    let bhs: [u8; 48] = input.bytes();
    let k = KEYS[usize::from(input.u8()) % KEYS.len()];
    let max = input.u32();
    let sel = input.u8();
    let text = input.rest();

    check_bhs(&bhs);
    for key in KEYS {
        check_key(text, key);
    }
    check_number(text);
    for pair in text.split(|&b| b == 0) {
        if let Some(eq) = pair.iter().position(|&b| b == b'=') {
            check_number(&pair[eq + 1..]);
        }
    }

    let declared = login::declared_recv_dsl(text);
    let expected = match login::key(text, IRDSL) {
        Some(v) => login::number(v),
        None => login::key(text, MRDSL).and_then(login::number),
    };
    assert_eq!(declared, expected);
    assert_eq!(
        login::is_discovery(text),
        text.split(|&b| b == 0)
            .filter_map(|p| value_of(p, "SessionType"))
            .last()
            == Some(b"Discovery")
    );

    // The driver passes an output as long as the text; try shorter and
    // longer ones too.
    let out_len = match sel {
        0..=127 => text.len(),
        128..=191 => text.len().saturating_sub(usize::from(sel - 128)),
        _ => text.len() + usize::from(sel - 192),
    };
    check_clamp(text, k, max, out_len);
    check_recv_limit(&bhs, text, max);
});
