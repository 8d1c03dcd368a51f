//! Parsing and validating a blob's header and structural sections.

use super::*;

impl Plan {
    /// Parse and validate the header and the small structural sections (table, block word bases,
    /// states, lane starts, padding). After this, decoding can only fail on the word streams
    /// themselves (a lane running out of words, or ending off `2^15`).
    pub fn parse(blob: &[u8]) -> Result<Plan> {
        if blob.len() < HEADER_BYTES {
            if blob.len() >= 4 && blob.get(..4) != Some(&MAGIC[..]) {
                return Err(FormatError::malformed(
                    "neuzip blob",
                    "bad magic (not a NeuZip stream)",
                ));
            }
            return Err(trunc(blob.len(), 0, HEADER_BYTES));
        }
        if blob.get(..4) != Some(&MAGIC[..]) {
            return Err(FormatError::malformed(
                "neuzip blob",
                "bad magic (not a NeuZip stream)",
            ));
        }
        let byte = |i: usize| blob.get(i).copied().unwrap_or(0);
        let version = byte(4);
        if version != VERSION && version != VERSION_V1 {
            return Err(FormatError::malformed(
                "neuzip blob",
                format!("layout version {version} (this build reads {VERSION_V1} and {VERSION}): re-pack with this build, or upgrade tern"),
            ));
        }
        let dtype = match byte(5) {
            0 => FloatType::F32,
            1 => FloatType::F16,
            2 => FloatType::Bf16,
            d => {
                return Err(FormatError::malformed(
                    "neuzip blob",
                    format!("unknown dtype code {d}"),
                ))
            }
        };
        let mantissa_bits = byte(6);
        if mantissa_bits > full_mantissa_bits(dtype) {
            return Err(FormatError::malformed(
                "neuzip blob",
                format!("{mantissa_bits} mantissa bits for {dtype:?}"),
            ));
        }
        if u32::from(byte(7)) != PROB_BITS {
            return Err(FormatError::malformed(
                "neuzip blob",
                format!("prob_bits {} (must be {PROB_BITS})", byte(7)),
            ));
        }
        let n = rd_u64(blob, 8)?;
        let row_len = rd_u64(blob, 16)?;
        let f = |i: usize| rd_u32(blob, 24 + 4 * i);
        let (lanes, block_len, rpb, bpr, n_blocks, n_syms, n_words) =
            (f(0)?, f(1)?, f(2)?, f(3)?, f(4)?, f(5)?, f(6)?);
        let bad = |d: String| FormatError::malformed("neuzip blob", d);
        if row_len == 0 || n % row_len != 0 {
            return Err(bad(format!("{n} elements are not whole rows of {row_len}")));
        }
        if !(1..=MAX_LANES).contains(&lanes) {
            return Err(bad(format!("{lanes} lanes (1..={MAX_LANES})")));
        }
        if !(1..=MAX_BLOCK_LEN).contains(&block_len) || rpb == 0 || bpr == 0 {
            return Err(bad(format!(
                "block geometry len={block_len} rows/block={rpb} blocks/row={bpr}"
            )));
        }
        let rows = n / row_len;
        let expect_blocks = if bpr == 1 {
            if u64::from(rpb).checked_mul(row_len) != Some(u64::from(block_len)) {
                return Err(bad(format!(
                    "block_len {block_len} is not {rpb} rows of {row_len}"
                )));
            }
            rows.div_ceil(u64::from(rpb))
        } else {
            if rpb != 1
                || u64::from(block_len) >= row_len
                || row_len.div_ceil(u64::from(block_len)) != u64::from(bpr)
            {
                return Err(bad(format!(
                    "rows of {row_len} cut into {bpr} blocks of {block_len} (rows/block {rpb})"
                )));
            }
            rows.saturating_mul(u64::from(bpr))
        };
        if expect_blocks != u64::from(n_blocks) {
            return Err(bad(format!(
                "{n_blocks} blocks, geometry gives {expect_blocks}"
            )));
        }
        let l = Layout::of(dtype);
        if u64::from(n_syms) > l.alphabet() as u64 || (n_syms == 0) != (n == 0) {
            return Err(bad(format!("{n_syms} table entries for {n} elements")));
        }
        if u64::from(n_words) > n {
            return Err(bad(format!(
                "{n_words} words for {n} symbols (at most one per symbol)"
            )));
        }
        let w = u64::from(mantissa_bits) + 1;
        let raw_bytes = n
            .checked_mul(w)
            .map(|b| b.div_ceil(8))
            .ok_or_else(|| bad("element count overflows".into()))?;
        let offs = layout(
            u64::from(n_syms),
            u64::from(n_blocks),
            u64::from(lanes),
            u64::from(n_words),
            raw_bytes,
        );
        for (i, &o) in offs.iter().enumerate() {
            let stored = rd_u32(blob, 52 + 4 * i)?;
            if u64::from(stored) != o {
                return Err(bad(format!(
                    "section {} offset {stored}, expected {o}",
                    i + 2
                )));
            }
        }
        if offs[6] != blob.len() as u64 {
            return Err(FormatError::Truncated {
                what: "neuzip blob".into(),
                start: 0,
                end: offs[6],
                len: blob.len() as u64,
            });
        }
        let sec = |a: u64, len: u64| Section {
            offset: a as u32,
            len: len as u32,
        }; // ok: ≤ blob.len() = offs[6] < 2^32
        let plan = Plan {
            version,
            group: group_of(version),
            dtype,
            mantissa_bits,
            n_elements: n,
            row_len,
            lanes,
            block_len,
            rows_per_block: rpb,
            blocks_per_row: bpr,
            n_blocks,
            n_syms,
            n_words,
            table: sec(offs[0], offs[1] - offs[0]),
            block_words: sec(offs[1], offs[2] - offs[1]),
            states: sec(offs[2], offs[3] - offs[2]),
            lane_starts: sec(offs[3], offs[4] - offs[3]),
            words: sec(offs[4], offs[5] - offs[4]),
            raw: sec(offs[5], offs[6] - offs[5]),
            blob_len: offs[6] as u32,
        };
        plan.validate_sections(blob, raw_bytes)?;
        Ok(plan)
    }

    fn validate_sections(&self, blob: &[u8], raw_bytes: u64) -> Result<()> {
        self.symbol_table(blob)?;
        let mut prev = 0u32;
        for b in 0..=self.n_blocks {
            let v = self.block_word_base(blob, b)?;
            if (b == 0 && v != 0) || v < prev || (b == self.n_blocks && v != self.n_words) {
                return Err(corrupt(format!("block word base {b} = {v} out of order")));
            }
            if b > 0 {
                let (_, len) = self.block_span(b - 1);
                if v - prev > len {
                    return Err(corrupt(format!(
                        "block {} has {} words for {len} symbols",
                        b - 1,
                        v - prev
                    )));
                }
            }
            prev = v;
        }
        for i in 0..self.n_blocks as usize * self.lanes as usize {
            let s = rd_u32(blob, self.states.offset as usize + 4 * i)?;
            if !(RANS_L..rans::RANS_MAX).contains(&s) {
                return Err(corrupt(format!("lane state {s:#x} outside [2^15, 2^31)")));
            }
        }
        for b in 0..self.n_blocks {
            let count = self.block_word_base(blob, b + 1)? - self.block_word_base(blob, b)?;
            let mut prev = 0u32;
            for l in 0..self.lanes {
                let s = u32::from(self.lane_start(blob, b, l)?);
                if (l == 0 && s != 0) || s < prev || s > count {
                    return Err(corrupt(format!(
                        "lane start {s} of lane {l} in block {b} out of order"
                    )));
                }
                prev = s;
            }
        }
        // Padding after lane starts, words and raw plane (including unused bits) is zero.
        let zero_from = |what: &str, from: u64, sec: Section| -> Result<()> {
            let end = u64::from(sec.offset) + u64::from(sec.len);
            for at in u64::from(sec.offset) + from..end {
                if blob.get(at as usize).copied().unwrap_or(0) != 0 {
                    return Err(FormatError::NonZeroPadding {
                        what: format!("neuzip {what}"),
                        offset: at,
                    });
                }
            }
            Ok(())
        };
        zero_from(
            "lane starts",
            2 * u64::from(self.n_blocks) * u64::from(self.lanes),
            self.lane_starts,
        )?;
        zero_from("words", 2 * u64::from(self.n_words), self.words)?;
        zero_from("raw plane", raw_bytes, self.raw)?;
        let used_bits = self.n_elements * (u64::from(self.mantissa_bits) + 1);
        if used_bits % 8 != 0 {
            let last = blob
                .get(self.raw.offset as usize + (used_bits / 8) as usize)
                .copied()
                .unwrap_or(0);
            if last >> (used_bits % 8) != 0 {
                return Err(FormatError::NonZeroPadding {
                    what: "neuzip raw plane (unused bits)".into(),
                    offset: u64::from(self.raw.offset) + used_bits / 8,
                });
            }
        }
        Ok(())
    }

    /// Check that the blob holds what the container's encoding record says (the blob alone cannot
    /// tell bf16 k=7 from f32 k=7 with the same element count: both are valid readings).
    pub fn check_matches(&self, dtype: FloatType, mantissa_bits: u8) -> Result<()> {
        if self.dtype != dtype || self.mantissa_bits != mantissa_bits {
            return Err(FormatError::malformed(
                "neuzip blob",
                format!(
                    "holds {:?} with {} mantissa bits, the tensor record says {dtype:?} with {mantissa_bits}",
                    self.dtype, self.mantissa_bits
                ),
            ));
        }
        Ok(())
    }

    /// The frequency table as `(symbol, pdf)` in increasing symbol order, validated.
    pub fn symbol_table(&self, blob: &[u8]) -> Result<Vec<(u8, u32)>> {
        let alphabet = Layout::of(self.dtype).alphabet() as u32;
        let mut out = Vec::with_capacity(self.n_syms as usize);
        let mut sum = 0u32;
        for i in 0..self.n_syms as usize {
            let e = rd_u32(blob, self.table.offset as usize + 4 * i)?;
            let (sym, pdf) = (e & 0xFF, (e >> 16) & 0xFFF);
            if e & 0xF000_FF00 != 0
                || sym >= alphabet
                || pdf == 0
                || out.last().is_some_and(|&(p, _)| u32::from(p) >= sym)
            {
                return Err(corrupt(format!("frequency table entry {i} = {e:#x}")));
            }
            sum += pdf;
            out.push((sym as u8, pdf)); // ok: sym < alphabet ≤ 256
        }
        if self.n_syms > 0 && sum != PROB_SCALE {
            return Err(corrupt(format!(
                "frequencies sum to {sum}, not {PROB_SCALE}"
            )));
        }
        Ok(out)
    }

    /// The 2048-entry decode table (what a GPU keeps in workgroup memory).
    pub fn lut(&self, blob: &[u8]) -> Result<Box<[u32; LUT_SIZE]>> {
        rans::build_lut(&self.symbol_table(blob)?)
    }

    /// First word (index into section 6) of block `b`; `b = n_blocks` gives `n_words`.
    pub fn block_word_base(&self, blob: &[u8], b: u32) -> Result<u32> {
        rd_u32(blob, self.block_words.offset as usize + 4 * b as usize)
    }

    /// State lane `l` of block `b` starts from.
    pub fn lane_state(&self, blob: &[u8], b: u32, l: u32) -> Result<u32> {
        rd_u32(
            blob,
            self.states.offset as usize + 4 * (b as usize * self.lanes as usize + l as usize),
        )
    }

    /// First word of lane `l` in block `b`, relative to the block's base.
    pub fn lane_start(&self, blob: &[u8], b: u32, l: u32) -> Result<u16> {
        rd_u16(
            blob,
            self.lane_starts.offset as usize + 2 * (b as usize * self.lanes as usize + l as usize),
        )
    }

    /// Absolute word range `[begin, end)` of lane `l` in block `b`.
    pub fn lane_words(&self, blob: &[u8], b: u32, l: u32) -> Result<Range<usize>> {
        let base = self.block_word_base(blob, b)? as usize;
        let begin = base + usize::from(self.lane_start(blob, b, l)?);
        let end = if l + 1 < self.lanes {
            base + usize::from(self.lane_start(blob, b, l + 1)?)
        } else {
            self.block_word_base(blob, b + 1)? as usize
        };
        Ok(begin..end)
    }

    /// Number of rows.
    pub fn rows(&self) -> u64 {
        self.n_elements / self.row_len
    }

    /// First element and symbol count of block `b < n_blocks`.
    pub fn block_span(&self, b: u32) -> (u64, u32) {
        let bl = u64::from(self.block_len);
        let (start, limit) = if self.blocks_per_row == 1 {
            let start = u64::from(b) * bl;
            (start, self.n_elements)
        } else {
            let s = u64::from(self.blocks_per_row);
            let row = u64::from(b) / s;
            let j = u64::from(b) % s;
            (row * self.row_len + j * bl, (row + 1) * self.row_len)
        };
        (start, limit.saturating_sub(start).min(bl) as u32) // ok: ≤ block_len
    }

    /// The blocks holding rows `first_row .. first_row + n_rows` (which must be in range).
    pub fn blocks_for_rows(&self, first_row: u64, n_rows: u64) -> Range<u32> {
        if n_rows == 0 {
            return 0..0;
        }
        let end_row = first_row + n_rows;
        let (b0, b1) = if self.blocks_per_row == 1 {
            let r = u64::from(self.rows_per_block);
            (first_row / r, end_row.div_ceil(r))
        } else {
            let s = u64::from(self.blocks_per_row);
            (first_row * s, end_row * s)
        };
        let nb = u64::from(self.n_blocks);
        (b0.min(nb) as u32)..(b1.min(nb) as u32) // ok: ≤ n_blocks
    }
}
