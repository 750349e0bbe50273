// SPDX-License-Identifier: GPL-2.0

//! Helpers shared by the fuzz targets: reading fixed-size values off the
//! front of the fuzzer's input.

/// Takes values off the front of a fuzz input; past its end, zeros.
pub struct Input<'a> {
    rest: &'a [u8],
}

impl<'a> Input<'a> {
    pub fn new(data: &'a [u8]) -> Self {
        Self { rest: data }
    }

    /// The next `N` bytes, zero-filled past the end of the input.
    pub fn bytes<const N: usize>(&mut self) -> [u8; N] {
        let mut out = [0u8; N];
        let n = N.min(self.rest.len());
        out[..n].copy_from_slice(&self.rest[..n]);
        self.rest = &self.rest[n..];
        out
    }

    pub fn u8(&mut self) -> u8 {
        self.bytes::<1>()[0]
    }

    pub fn bool(&mut self) -> bool {
        self.u8() & 1 != 0
    }

    pub fn u16(&mut self) -> u16 {
        u16::from_be_bytes(self.bytes())
    }

    pub fn u32(&mut self) -> u32 {
        u32::from_be_bytes(self.bytes())
    }

    pub fn u64(&mut self) -> u64 {
        u64::from_be_bytes(self.bytes())
    }

    /// Whether the input is used up.
    pub fn is_empty(&self) -> bool {
        self.rest.is_empty()
    }

    /// Whatever is left.
    pub fn rest(self) -> &'a [u8] {
        self.rest
    }
}
