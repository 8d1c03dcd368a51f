//! Making a delta: [`create`] plans every tuned tensor's chunks against its base and encodes them.

use super::*;

// ------------------------------------------------------------------------------------------------
// Creating a delta

/// What [`create`] did for one tensor.
#[derive(Debug, Clone, PartialEq)]
pub struct TensorReport {
    pub name: String,
    pub encoding: String,
    /// "base", "copy", "fm-delta", "ternary", "ggml", "neuzip", "sparse-bytes" (the main chunk kind).
    pub method: String,
    pub tuned_bytes: u64,
    pub delta_bytes: u64,
}

/// What [`create`] produced.
#[derive(Debug, Clone, PartialEq)]
pub struct CreateReport {
    pub tensors: Vec<TensorReport>,
    pub delta_bytes: u64,
    pub tuned_bytes: u64,
}

/// Chunk plan for one target: `(kind, out range)`.
pub(super) fn plan_chunks(ctx: Ctx, target_len: usize) -> Vec<(u32, Range<usize>)> {
    let cut = |kind: u32, range: Range<usize>, step: usize| -> Vec<(u32, Range<usize>)> {
        let step = step.max(1);
        let mut v = Vec::new();
        let mut s = range.start;
        while s < range.end {
            let e = (s + step).min(range.end);
            v.push((kind, s..e));
            s = e;
        }
        v
    };
    match ctx {
        Ctx::Float(Width::W16) => cut(K_FM16, 0..target_len, FM_CHUNK_ELEMS * 2),
        Ctx::Float(Width::W32) => cut(K_FM32, 0..target_len, FM_CHUNK_ELEMS * 4),
        Ctx::Ternary {
            cols,
            row_bytes,
            codes_len,
            scale,
            ..
        } => {
            let rows_per = (SPARSE_CHUNK_ELEMS / cols.max(1)).max(1);
            let mut v = cut(K_TERNARY, 0..codes_len, rows_per * row_bytes);
            let (k, w) = match scale {
                Width::W16 => (K_FM16, 2),
                Width::W32 => (K_FM32, 4),
            };
            v.extend(cut(k, codes_len..target_len, FM_CHUNK_ELEMS * w));
            v
        }
        Ctx::Ggml(g) => cut(K_GGML, 0..target_len, GGML_CHUNK_BLOCKS * g.block_bytes),
        Ctx::Other => cut(K_SPARSE, 0..target_len, SPARSE_CHUNK_ELEMS),
    }
}

pub(super) fn sparse_plan(target_len: usize) -> Vec<(u32, Range<usize>)> {
    plan_chunks(Ctx::Other, target_len)
}

/// Encode a payload for `plan` (each chunk falls back to base or copy when that is no larger).
pub(super) fn encode_payload(
    plan: Vec<(u32, Range<usize>)>,
    ctx: Ctx,
    base: &[u8],
    tuned: &[u8],
    threads: usize,
) -> Result<Option<Vec<u8>>> {
    let encoded = par_map(plan, threads, |(kind, r)| {
        let (b, t) = match (base.get(r.clone()), tuned.get(r.clone())) {
            (Some(b), Some(t)) => (b, t),
            _ => return Ok(None),
        };
        if b == t {
            return Ok(Some((K_BASE, r, Vec::new())));
        }
        Ok(Some(match encode_chunk(kind, ctx, b, t) {
            Some(d) if d.len() < t.len() => (kind, r, d),
            _ => (K_COPY, r, t.to_vec()),
        }))
    })?;
    let Some(chunks) = encoded.into_iter().collect::<Option<Vec<_>>>() else {
        return Ok(None);
    };
    Ok(Some(assemble(&chunks)))
}

pub(super) fn assemble(chunks: &[(u32, Range<usize>, Vec<u8>)]) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(&(chunks.len() as u32).to_le_bytes()); // ok: chunk count < 2^32
    out.extend_from_slice(&0u32.to_le_bytes());
    for (kind, r, d) in chunks {
        out.extend_from_slice(&kind.to_le_bytes());
        out.extend_from_slice(&(d.len() as u32).to_le_bytes()); // ok: chunks are < 4 GiB
        out.extend_from_slice(&(r.start as u64).to_le_bytes());
        out.extend_from_slice(&(r.end as u64).to_le_bytes());
    }
    for (_, _, d) in chunks {
        out.extend_from_slice(d);
        coder::pad4(&mut out);
    }
    out
}

pub(super) fn copy_payload(tuned: &[u8]) -> Vec<u8> {
    if tuned.is_empty() {
        return assemble(&[]);
    }
    assemble(&[(K_COPY, 0..tuned.len(), tuned.to_vec())])
}

/// NeuZip parameters that re-encode `raw` to exactly `blob`, if any.
pub(super) fn neuzip_params(
    dtype: FloatType,
    mantissa_bits: u8,
    raw: &[u8],
    row_len: usize,
    blob: &[u8],
) -> Option<(neuzip::Params, u8)> {
    let plan = neuzip::Plan::parse(blob).ok()?;
    let n = (raw.len() / dtype.size()) as u64;
    let auto = if plan.version >= 2 {
        neuzip::Params::auto_v2(n, row_len as u64)
    } else {
        neuzip::Params::auto(n, row_len as u64)
    };
    let candidates = [
        auto,
        neuzip::Params {
            lanes: plan.lanes,
            block_symbols: plan.block_len,
        },
        neuzip::Params {
            lanes: plan.lanes,
            block_symbols: neuzip::DEFAULT_BLOCK_SYMBOLS,
        },
    ];
    candidates
        .into_iter()
        .find(|&p| {
            neuzip_encode(plan.version, dtype, mantissa_bits, raw, row_len, p)
                .is_ok_and(|b| b == blob)
        })
        .map(|p| (p, plan.version))
}

pub(super) fn decode_neuzip_raw(info: &TensorInfo, bytes: &[u8]) -> Result<Vec<u8>> {
    if let Encoding::NeuZip {
        dtype,
        mantissa_bits,
    } = info.encoding
    {
        let plan = neuzip::Plan::parse(bytes)?;
        plan.check_matches(dtype, mantissa_bits)?;
        let n = element_count(&info.shape)?;
        let row_len = info.shape.last().copied().unwrap_or(1).max(1);
        if plan.n_elements != n || plan.row_len != row_len {
            return Err(FormatError::malformed(
                format!("tensor {:?}", info.name),
                "NeuZip blob does not match the tensor's shape",
            ));
        }
        neuzip::decode(bytes)
    } else {
        Err(FormatError::InvalidArgument(format!(
            "tensor {:?} is not NeuZip",
            info.name
        )))
    }
}

/// Encode one tuned tensor against its base (if any). Returns (record without payload offset,
/// payload bytes, method name).
pub(super) fn encode_tensor(
    info: &TensorInfo,
    tuned: &[u8],
    base: Option<(&TensorInfo, &[u8])>,
    threads: usize,
) -> Result<(Option<u64>, Method, Vec<u8>, &'static str)> {
    let copy = || Ok((None, Method::Chunks, copy_payload(tuned), "copy"));
    let Some((binfo, bbytes)) = base.filter(|(b, _)| {
        b.encoding == info.encoding && b.shape == info.shape && b.size == info.size
    }) else {
        return copy();
    };
    let base_ck = Some(binfo.checksum);
    if bbytes == tuned {
        return Ok((
            base_ck,
            Method::Chunks,
            assemble(&[(K_BASE, 0..tuned.len(), Vec::new())]),
            "base",
        ));
    }
    // NeuZip: FM-Delta on the decoded floats, re-encoded on apply.
    if let Encoding::NeuZip {
        dtype,
        mantissa_bits,
    } = info.encoding
    {
        let (Ok(rb), Ok(rt)) = (
            decode_neuzip_raw(binfo, bbytes),
            decode_neuzip_raw(info, tuned),
        ) else {
            return copy();
        };
        let row_len = usize_of(info.shape.last().copied().unwrap_or(1).max(1))?;
        if let Some((p, layout)) = neuzip_params(dtype, mantissa_bits, &rt, row_len, tuned) {
            let method = Method::NeuZip {
                lanes: p.lanes,
                block_symbols: p.block_symbols,
                layout,
            };
            let ctx = Ctx::Float(float_width(dtype));
            if let Some(payload) =
                encode_payload(plan_chunks(ctx, rt.len()), ctx, &rb, &rt, threads)?
            {
                if payload.len() < tuned.len() {
                    return Ok((base_ck, method, payload, "neuzip"));
                }
            }
        }
        return copy();
    }
    let ctx = ctx_of(info, Method::Chunks)?;
    let name = match ctx {
        Ctx::Float(_) => "fm-delta",
        Ctx::Ternary { .. } => "ternary",
        Ctx::Ggml(_) => "ggml",
        Ctx::Other => "sparse-bytes",
    };
    let attempts = [
        (plan_chunks(ctx, tuned.len()), name),
        (sparse_plan(tuned.len()), "sparse-bytes"),
    ];
    for (plan, label) in attempts {
        let Some(payload) = encode_payload(plan, ctx, bbytes, tuned, threads)? else {
            continue;
        };
        if payload.len() >= tuned.len() {
            continue;
        }
        // Decode what we encoded: the codec must reproduce the tensor exactly.
        let chunks = parse_chunks(
            &payload,
            0..payload.len(),
            tuned.len(),
            ctx,
            true,
            &info.name,
        )?;
        let mut out = vec![0u8; tuned.len()];
        let ok = decode_chunks(&payload, &chunks, ctx, bbytes, &mut out, threads).is_ok()
            && out == tuned;
        if ok {
            return Ok((base_ck, Method::Chunks, payload, label));
        }
        log::debug!(
            "tensor {:?}: {label} does not reproduce it, trying the next",
            info.name
        );
    }
    copy()
}

/// Make a delta that turns `base` into `tuned`. Returns the `.ternd` bytes and a report.
pub fn create(
    base: &TernFile,
    tuned: &TernFile,
    threads: usize,
) -> Result<(Vec<u8>, CreateReport)> {
    let tb = tuned.file_bytes();
    let data = tuned
        .sections()
        .iter()
        .find(|s| s.kind == SECTION_DATA)
        .copied()
        .ok_or_else(|| FormatError::malformed("tuned file", "no data section"))?;
    let data_end = data.offset.saturating_add(data.size);
    let prefix = tb
        .get(..usize_of(data.offset)?)
        .ok_or_else(|| FormatError::malformed("tuned file", "data section out of range"))?;
    let suffix = tb
        .get(usize_of(data_end)?..)
        .ok_or_else(|| FormatError::malformed("tuned file", "data section out of range"))?;
    let mut payloads: Vec<Vec<u8>> = vec![prefix.to_vec(), suffix.to_vec()];
    let mut records = Vec::new();
    let mut report = Vec::new();
    for (i, info) in tuned.tensors().iter().enumerate() {
        let tv = tuned.tensor_at(i)?;
        let bv = match base.index_of(&info.name) {
            Some(j) => Some(base.tensor_at(j)?),
            None => None,
        };
        let (base_checksum, method, payload, label) =
            encode_tensor(info, tv.bytes, bv.map(|v| (v.info, v.bytes)), threads)?;
        report.push(TensorReport {
            name: info.name.clone(),
            encoding: info.encoding.name(),
            method: label.to_string(),
            tuned_bytes: info.size,
            delta_bytes: payload.len() as u64,
        });
        records.push(Record {
            info: info.clone(),
            base_checksum,
            method,
            payload: Blob {
                offset: 0,
                size: payload.len() as u64,
                checksum: xxh3_64(&payload),
            },
        });
        payloads.push(payload);
    }
    let blob = |p: &Vec<u8>| Blob {
        offset: 0,
        size: p.len() as u64,
        checksum: xxh3_64(p),
    };
    let index = Index {
        tuned_size: tb.len() as u64,
        tuned_hash: xxh3_64(tb),
        data_offset: data.offset,
        data_size: data.size,
        prefix: blob(&payloads[0]),
        suffix: blob(&payloads[1]),
        skeleton_hash: skeleton_hash(&payloads[0], &payloads[1]),
        tensors: records,
    };
    let out = write_delta(base_identity(base)?, index, &payloads)?;
    let total = out.len() as u64;
    let rep = CreateReport {
        delta_bytes: total,
        tuned_bytes: tb.len() as u64,
        tensors: report,
    };
    Ok((out, rep))
}

/// The delta file for `index` and its payloads (prefix, suffix, then one per tensor record): the
/// blobs are placed after the index (8-aligned), the index padded to a fixed size, and the header
/// sealed with the index's and its own checksums.
pub(super) fn write_delta(base_id: u64, mut index: Index, payloads: &[Vec<u8>]) -> Result<Vec<u8>> {
    // The index's length depends on the offsets it holds: fix the offsets with a generous index
    // size estimate, then pad the index to that size.
    let est = serde_json::to_vec(&index)
        .map_err(|e| FormatError::InvalidArgument(format!("delta index: {e}")))?
        .len()
        + 32 * (index.tensors.len() + 2)
        + 64;
    let mut at = (HEADER_SIZE + est).div_ceil(8) as u64 * 8;
    let mut place = |b: &mut Blob| {
        b.offset = at;
        at = (at + b.size).div_ceil(8) * 8;
    };
    place(&mut index.prefix);
    place(&mut index.suffix);
    for r in &mut index.tensors {
        place(&mut r.payload);
    }
    let mut json = serde_json::to_vec(&index)
        .map_err(|e| FormatError::InvalidArgument(format!("delta index: {e}")))?;
    if json.len() > est {
        return Err(FormatError::InvalidArgument(
            "delta index estimate too small".into(),
        ));
    }
    json.resize(est, b' '); // JSON allows trailing whitespace
    let mut out = vec![0u8; HEADER_SIZE];
    out.extend_from_slice(&json);
    let blobs = std::iter::once(&index.prefix)
        .chain(std::iter::once(&index.suffix))
        .chain(index.tensors.iter().map(|r| &r.payload));
    for (b, p) in blobs.zip(payloads) {
        out.resize(usize_of(b.offset)?, 0);
        out.extend_from_slice(p);
    }
    let total = out.len() as u64;
    let mut h = [0u8; HEADER_SIZE];
    h[0..8].copy_from_slice(&MAGIC);
    h[8..12].copy_from_slice(&VERSION.to_le_bytes());
    h[12..16].copy_from_slice(&(HEADER_SIZE as u32).to_le_bytes());
    h[16..24].copy_from_slice(&base_id.to_le_bytes());
    h[24..32].copy_from_slice(&(HEADER_SIZE as u64).to_le_bytes());
    h[32..40].copy_from_slice(&(json.len() as u64).to_le_bytes());
    h[40..48].copy_from_slice(&xxh3_64(&json).to_le_bytes());
    h[48..56].copy_from_slice(&total.to_le_bytes());
    let hh = xxh3_64(&h[0..56]);
    h[56..64].copy_from_slice(&hh.to_le_bytes());
    out[..HEADER_SIZE].copy_from_slice(&h);
    Ok(out)
}

/// [`create`] from and to paths.
pub fn create_file(base: &Path, tuned: &Path, out: &Path, threads: usize) -> Result<CreateReport> {
    crate::output::refuse_input_as_output(&[base, tuned], out, "delta output")?;
    let base = TernFile::open(base)?;
    let tuned = TernFile::open(tuned)?;
    let (bytes, rep) = create(&base, &tuned, threads)?;
    crate::output::write_atomic(out, &bytes)?;
    Ok(rep)
}
