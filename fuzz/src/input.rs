//! Fuzz inputs read as streams of little-endian numbers, and seeds written as the same.

/// A fuzz input read front to back. Reads past the end give zeros, so every input decodes.
pub struct Input<'a> {
    data: &'a [u8],
}

impl<'a> Input<'a> {
    pub fn new(data: &'a [u8]) -> Self {
        Input { data }
    }

    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }

    pub fn bytes(&mut self, n: usize) -> Vec<u8> {
        let take = n.min(self.data.len());
        let mut v = self.data[..take].to_vec();
        v.resize(n, 0);
        self.data = &self.data[take..];
        v
    }

    /// `N` bytes, zeros past the end. No allocation: the targets read most of an input a
    /// number at a time, and a heap allocation per number (with ASan's allocator) cost more
    /// than the reading.
    pub fn array<const N: usize>(&mut self) -> [u8; N] {
        let mut a = [0u8; N];
        let take = N.min(self.data.len());
        a[..take].copy_from_slice(&self.data[..take]);
        self.data = &self.data[take..];
        a
    }

    pub fn u8(&mut self) -> u8 {
        match self.data.split_first() {
            Some((&b, rest)) => {
                self.data = rest;
                b
            }
            None => 0,
        }
    }

    pub fn u16(&mut self) -> u16 {
        u16::from_le_bytes(self.array())
    }

    pub fn u32(&mut self) -> u32 {
        u32::from_le_bytes(self.array())
    }

    pub fn u64(&mut self) -> u64 {
        u64::from_le_bytes(self.array())
    }

    /// Everything not read yet (the input is empty afterwards).
    pub fn rest(&mut self) -> &'a [u8] {
        std::mem::take(&mut self.data)
    }

    pub fn bool(&mut self) -> bool {
        self.u8() & 1 != 0
    }

    /// A choice among `n` alternatives.
    pub fn choose(&mut self, n: usize) -> usize {
        self.u8() as usize % n
    }

    /// One of `values` (by a choice byte), or, for the choice after the last, any u32.
    pub fn one_of(&mut self, values: &[u32]) -> u32 {
        match self.choose(values.len() + 1) {
            i if i < values.len() => values[i],
            _ => self.u32(),
        }
    }
}

/// Writes what [`Input`] reads: the encoder of the seed corpora.
#[derive(Default)]
pub struct Seed(pub Vec<u8>);

impl Seed {
    pub fn u8(&mut self, v: u8) -> &mut Self {
        self.0.push(v);
        self
    }
    pub fn u16(&mut self, v: u16) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    pub fn u32(&mut self, v: u32) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    pub fn u64(&mut self, v: u64) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    pub fn bytes(&mut self, v: &[u8]) -> &mut Self {
        self.0.extend_from_slice(v);
        self
    }
}
