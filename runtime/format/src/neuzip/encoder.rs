//! The NeuZip encoder (both layouts).

use super::*;

/// Encode with the default [`Params`]. `data`: raw little-endian elements of `dtype`; `row_len`:
/// elements per row (the last dimension; used to align blocks to rows; may be 0 only for an empty
/// tensor); `mantissa_bits`: bits kept (full width = lossless: 23/10/7 for f32/f16/bf16; lossy
/// 3, 1 or 0 as in NeuZip, any smaller value works).
pub fn encode(dtype: FloatType, mantissa_bits: u8, data: &[u8], row_len: usize) -> Result<Vec<u8>> {
    let n = data.len() / dtype.size();
    encode_with(
        dtype,
        mantissa_bits,
        data,
        row_len,
        Params::auto(n as u64, row_len as u64),
    )
}

/// [`encode`] with explicit block parameters. Deterministic: the same input gives the same bytes.
pub fn encode_with(
    dtype: FloatType,
    mantissa_bits: u8,
    data: &[u8],
    row_len: usize,
    params: Params,
) -> Result<Vec<u8>> {
    encode_impl(VERSION_V1, dtype, mantissa_bits, data, row_len, params)
}

/// Encode in layout 2 with [`Params::auto_v2`] (the GPU layout: many short lanes, groups of 4).
pub fn encode_v2(
    dtype: FloatType,
    mantissa_bits: u8,
    data: &[u8],
    row_len: usize,
) -> Result<Vec<u8>> {
    let n = data.len() / dtype.size();
    let p = Params::auto_v2(n as u64, row_len as u64);
    encode_v2_with(dtype, mantissa_bits, data, row_len, p)
}

/// [`encode_v2`] with explicit block parameters.
pub fn encode_v2_with(
    dtype: FloatType,
    mantissa_bits: u8,
    data: &[u8],
    row_len: usize,
    params: Params,
) -> Result<Vec<u8>> {
    encode_impl(VERSION, dtype, mantissa_bits, data, row_len, params)
}

/// Encode in layout `version` (1 or 2) with that layout's automatic parameters.
pub fn encode_version(
    version: u8,
    dtype: FloatType,
    mantissa_bits: u8,
    data: &[u8],
    row_len: usize,
) -> Result<Vec<u8>> {
    match version {
        1 => encode(dtype, mantissa_bits, data, row_len),
        2 => encode_v2(dtype, mantissa_bits, data, row_len),
        v => Err(FormatError::InvalidArgument(format!(
            "NeuZip layout {v}: this build writes layouts 1 and 2"
        ))),
    }
}

fn encode_impl(
    version: u8,
    dtype: FloatType,
    mantissa_bits: u8,
    data: &[u8],
    row_len: usize,
    params: Params,
) -> Result<Vec<u8>> {
    let l = Layout::of(dtype);
    let full = full_mantissa_bits(dtype);
    if mantissa_bits > full {
        return Err(FormatError::InvalidArgument(format!(
            "{dtype:?} has {full} mantissa bits, asked to keep {mantissa_bits}"
        )));
    }
    if !(1..=MAX_LANES).contains(&params.lanes)
        || !(1..=MAX_BLOCK_LEN).contains(&params.block_symbols)
    {
        return Err(FormatError::InvalidArgument(format!(
            "neuzip params {params:?}: lanes must be 1..={MAX_LANES}, block_symbols 1..={MAX_BLOCK_LEN}"
        )));
    }
    let size = dtype.size();
    if data.len() % size != 0 {
        return Err(FormatError::InvalidArgument(format!(
            "{} bytes is not a whole number of {dtype:?} elements",
            data.len()
        )));
    }
    let n = data.len() / size;
    if n > 0 && (row_len == 0 || n % row_len != 0) {
        return Err(FormatError::InvalidArgument(format!(
            "{n} elements are not a whole number of rows of {row_len}"
        )));
    }
    let k = u32::from(mantissa_bits);
    let lossy = mantissa_bits < full;
    let w = k + 1;
    let row_len = row_len.max(1) as u64;
    let n64 = n as u64;

    // Split into exponent symbols and raw fields.
    let mut syms = Vec::with_capacity(n);
    let mut counts = [0u64; 256];
    let raw_len = (n64 * u64::from(w)).div_ceil(8);
    let mut bits = BitWriter::with_capacity(usize::try_from(raw_len).unwrap_or(0));
    for c in data.chunks_exact(size) {
        let mut x = match *c {
            [a, b] => u32::from(u16::from_le_bytes([a, b])),
            [a, b, c, d] => u32::from_le_bytes([a, b, c, d]),
            _ => 0, // unreachable: size is 2 or 4
        };
        if lossy {
            x = float::round_lossy(l, k, x)?;
        }
        let s = float::symbol(l, x);
        counts[usize::from(s)] += 1;
        syms.push(s);
        bits.put(float::field(l, k, x), w);
    }
    let raw = bits.finish();

    // Frequencies, encoder table.
    let table = rans::quantize(&counts);
    let mut enc = [(0u32, 0u32); 256];
    let mut cdf = 0;
    for &(s, pdf) in &table {
        enc[usize::from(s)] = (pdf, cdf);
        cdf += pdf;
    }

    // Blocks and lanes.
    let (block_len, rpb, bpr, n_blocks) = geometry(n64, row_len, params.block_symbols)?;
    let lanes = params.lanes as usize;
    let mut block_words: Vec<u32> = Vec::with_capacity(n_blocks as usize + 1);
    let mut states: Vec<u32> = Vec::with_capacity(n_blocks as usize * lanes);
    let mut starts: Vec<u16> = Vec::with_capacity(n_blocks as usize * lanes);
    let mut words: Vec<u16> = Vec::new();
    let group = group_of(version);
    let geo = Plan {
        version,
        group,
        dtype,
        mantissa_bits,
        n_elements: n64,
        row_len,
        lanes: params.lanes,
        block_len,
        rows_per_block: rpb,
        blocks_per_row: bpr,
        n_blocks,
        n_syms: 0,
        n_words: 0,
        table: Section { offset: 0, len: 0 },
        block_words: Section { offset: 0, len: 0 },
        states: Section { offset: 0, len: 0 },
        lane_starts: Section { offset: 0, len: 0 },
        words: Section { offset: 0, len: 0 },
        raw: Section { offset: 0, len: 0 },
        blob_len: 0,
    };
    let too_big = || FormatError::out_of_range("neuzip tensor", "compressed stream exceeds 4 GiB");
    for b in 0..n_blocks {
        let (start, len) = geo.block_span(b);
        let blk = syms
            .get(start as usize..start as usize + len as usize)
            .ok_or_else(|| FormatError::InvalidArgument("block outside the tensor".into()))?;
        let base = words.len();
        block_words.push(u32::try_from(base).map_err(|_| too_big())?);
        for lane in 0..lanes {
            let rel = u16::try_from(words.len() - base).map_err(|_| {
                FormatError::out_of_range("neuzip block", "lane start does not fit u16")
            })?;
            starts.push(rel);
            let g = group as usize;
            let it = blk
                .chunks(g)
                .skip(lane)
                .step_by(lanes)
                .flat_map(|c| c.iter().copied());
            states.push(rans::encode_lane(it, &enc, &mut words));
        }
    }
    block_words.push(u32::try_from(words.len()).map_err(|_| too_big())?);

    // Assemble.
    let n_syms = table.len() as u64;
    let offs = layout(
        n_syms,
        u64::from(n_blocks),
        lanes as u64,
        words.len() as u64,
        raw.len() as u64,
    );
    let total = usize::try_from(offs[6])
        .ok()
        .filter(|&t| u32::try_from(t).is_ok())
        .ok_or_else(too_big)?;
    let mut out = Vec::with_capacity(total);
    out.extend_from_slice(&MAGIC);
    out.extend_from_slice(&[version, dtype_code(dtype), mantissa_bits, PROB_BITS as u8]);
    out.extend_from_slice(&n64.to_le_bytes());
    out.extend_from_slice(&row_len.to_le_bytes());
    for v in [
        params.lanes,
        block_len,
        rpb,
        bpr,
        n_blocks,
        n_syms as u32,
        words.len() as u32,
    ] {
        out.extend_from_slice(&v.to_le_bytes());
    }
    for o in offs {
        out.extend_from_slice(&(o as u32).to_le_bytes()); // ok: all ≤ total ≤ u32::MAX
    }
    debug_assert_eq!(out.len(), HEADER_BYTES); // ok: the fixed-size fields just written, not input
    for &(s, pdf) in &table {
        out.extend_from_slice(&(u32::from(s) | (pdf << 16)).to_le_bytes());
    }
    for v in block_words.iter().chain(&states) {
        out.extend_from_slice(&v.to_le_bytes());
    }
    for v in &starts {
        out.extend_from_slice(&v.to_le_bytes());
    }
    out.resize(offs[4] as usize, 0);
    for v in &words {
        out.extend_from_slice(&v.to_le_bytes());
    }
    out.resize(offs[5] as usize, 0);
    out.extend_from_slice(&raw);
    out.resize(total, 0);
    Ok(out)
}
