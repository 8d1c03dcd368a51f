//! Reading a delta: [`DeltaFile`] validates a `.ternd` image and rebuilds the tuned `.tern` from a base.

use super::*;

// ------------------------------------------------------------------------------------------------
// Reading and applying

pub(super) enum Backing {
    Mmap(memmap2::Mmap),
    Owned(Vec<u8>),
}

/// An open, fully validated delta (every checksum and chunk table checked).
pub struct DeltaFile {
    data: Backing,
    base_id: u64,
    pub(super) index: Index,
    /// Parsed chunk tables, one per record.
    pub(super) chunks: Vec<Vec<Chunk>>,
}

impl std::fmt::Debug for DeltaFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeltaFile")
            .field("base_id", &self.base_id)
            .field("tensors", &self.index.tensors.len())
            .finish()
    }
}

impl DeltaFile {
    /// Map and validate a `.ternd` file.
    pub fn open(path: &Path) -> Result<Self> {
        let f = std::fs::File::open(path)?;
        // SAFETY: read-only mapping; tern never writes a file it has mapped (same caveat as TernFile).
        let map = unsafe { memmap2::Mmap::map(&f)? };
        Self::from_backing(Backing::Mmap(map))
    }

    /// Validate a delta held in memory.
    pub fn from_bytes(bytes: Vec<u8>) -> Result<Self> {
        Self::from_backing(Backing::Owned(bytes))
    }

    pub(super) fn bytes(&self) -> &[u8] {
        match &self.data {
            Backing::Mmap(m) => m,
            Backing::Owned(v) => v,
        }
    }

    fn from_backing(data: Backing) -> Result<Self> {
        let b: &[u8] = match &data {
            Backing::Mmap(m) => m,
            Backing::Owned(v) => v,
        };
        let len = b.len() as u64;
        let trunc = |what: &str, start: u64, end: u64| FormatError::Truncated {
            what: what.into(),
            start,
            end,
            len,
        };
        if b.len() < 8 || b[0..8] != MAGIC {
            if b.len() < 8 && MAGIC.starts_with(b) {
                return Err(trunc("delta header", 0, HEADER_SIZE as u64));
            }
            if b.len() >= 8 && b[0..8] == crate::container::MAGIC {
                return Err(FormatError::BadMagic {
                    remedy: "this is a .tern model, not a .ternd delta (pass it as the base)",
                });
            }
            return Err(FormatError::BadMagic {
                remedy: "expected a .ternd delta written by `tern delta create`",
            });
        }
        if b.len() < HEADER_SIZE {
            return Err(trunc("delta header", 0, HEADER_SIZE as u64));
        }
        let version = u32::from_le_bytes([b[8], b[9], b[10], b[11]]);
        if version != VERSION {
            return Err(FormatError::UnsupportedVersion {
                found: version,
                supported: VERSION,
            });
        }
        let stored = u64_at(b, 56);
        let computed = xxh3_64(&b[0..56]);
        if stored != computed {
            return Err(FormatError::Checksum {
                what: "delta header".into(),
                stored,
                computed,
            });
        }
        let hsize = u32::from_le_bytes([b[12], b[13], b[14], b[15]]);
        let (base_id, ioff, isize, ihash, fsize) = (
            u64_at(b, 16),
            u64_at(b, 24),
            u64_at(b, 32),
            u64_at(b, 40),
            u64_at(b, 48),
        );
        if fsize > len {
            return Err(trunc("delta", 0, fsize));
        }
        if fsize != len || hsize as usize != HEADER_SIZE || ioff != HEADER_SIZE as u64 {
            return Err(malformed(format!(
                "header: size {hsize}, index at {ioff}, file size {fsize} (file has {len})"
            )));
        }
        let iend = ioff
            .checked_add(isize)
            .filter(|&e| e <= len)
            .ok_or_else(|| trunc("delta index", ioff, ioff.saturating_add(isize)))?;
        let ib = &b[ioff as usize..iend as usize]; // ok: within len
        let computed = xxh3_64(ib);
        if computed != ihash {
            return Err(FormatError::Checksum {
                what: "delta index".into(),
                stored: ihash,
                computed,
            });
        }
        let index: Index =
            serde_json::from_slice(ib).map_err(|e| malformed(format!("index: {e}")))?;
        // Payloads: in the file after the index, not overlapping, checksums right.
        let mut ranges: Vec<(u64, u64, String)> = Vec::new();
        let mut check_blob = |blob: &Blob, what: String| -> Result<Range<usize>> {
            let end = blob
                .offset
                .checked_add(blob.size)
                .ok_or_else(|| malformed(format!("{what}: range overflows")))?;
            if blob.offset < iend || end > len {
                return Err(if end > len {
                    trunc(&what, blob.offset, end)
                } else {
                    malformed(format!(
                        "{what}: bytes {}..{end} overlap the index",
                        blob.offset
                    ))
                });
            }
            let r = blob.offset as usize..end as usize; // ok: ≤ len
            let computed = xxh3_64(&b[r.clone()]);
            if computed != blob.checksum {
                return Err(FormatError::Checksum {
                    what: what.clone(),
                    stored: blob.checksum,
                    computed,
                });
            }
            ranges.push((blob.offset, end, what));
            Ok(r)
        };
        let pre = check_blob(&index.prefix, "delta prefix".into())?;
        let suf = check_blob(&index.suffix, "delta suffix".into())?;
        let data_end = index
            .data_offset
            .checked_add(index.data_size)
            .ok_or_else(|| malformed("data section range overflows"))?;
        if pre.len() as u64 != index.data_offset
            || data_end.checked_add(suf.len() as u64) != Some(index.tuned_size)
        {
            return Err(malformed(format!(
                "prefix {} + data {} + suffix {} bytes do not make the tuned size {}",
                pre.len(),
                index.data_size,
                suf.len(),
                index.tuned_size
            )));
        }
        let mut chunks = Vec::with_capacity(index.tensors.len());
        let mut spans: Vec<(u64, u64, usize)> = Vec::new();
        let mut names = std::collections::HashSet::new();
        for (i, r) in index.tensors.iter().enumerate() {
            let name = &r.info.name;
            if !names.insert(name.as_str()) {
                return Err(FormatError::DuplicateTensor(name.clone()));
            }
            let pr = check_blob(&r.payload, format!("delta payload of tensor {name:?}"))?;
            let end = r
                .info
                .offset
                .checked_add(r.info.size)
                .filter(|&e| e <= index.data_size)
                .ok_or_else(|| malformed(format!("tensor {name:?} outside the data section")))?;
            spans.push((r.info.offset, end, i));
            let ctx = ctx_of(&r.info, r.method)?;
            let target = match (r.method, ctx) {
                (Method::NeuZip { .. }, Ctx::Float(w)) => usize_of(element_count(&r.info.shape)?)?
                    .checked_mul(w.bytes())
                    .ok_or_else(|| malformed(format!("tensor {name:?} too large")))?,
                _ => usize_of(r.info.size)?,
            };
            chunks.push(parse_chunks(
                b,
                pr,
                target,
                ctx,
                r.base_checksum.is_some(),
                name,
            )?);
        }
        // The data section holds the tensors and at most one alignment gap before each: a larger
        // claim is refused before anything is allocated for it.
        let bound = spans
            .iter()
            .try_fold(0u64, |acc, (s, e, _)| {
                acc.checked_add(e - s)?.checked_add(256)
            })
            .and_then(|x| x.checked_add(256));
        if bound.is_none_or(|b| index.data_size > b) {
            return Err(malformed(format!(
                "data section of {} bytes for {} tensors of {} bytes",
                index.data_size,
                spans.len(),
                spans.iter().map(|(s, e, _)| e - s).sum::<u64>()
            )));
        }
        spans.sort_unstable();
        for w in spans.windows(2) {
            if w[0].1 > w[1].0 {
                return Err(malformed("tuned tensors overlap"));
            }
        }
        ranges.sort_unstable();
        for w in ranges.windows(2) {
            if w[0].1 > w[1].0 {
                return Err(malformed(format!("{} and {} overlap", w[0].2, w[1].2)));
            }
        }
        // Every byte outside the header, index and payloads must be zero padding, so a flipped
        // bit anywhere in the file is detected.
        let mut at = iend;
        for (s, e, _) in
            ranges
                .iter()
                .map(|(s, e, w)| (*s, *e, w))
                .chain([(len, len, &String::new())])
        {
            if s > at && b[at as usize..s as usize].iter().any(|&x| x != 0) {
                return Err(FormatError::NonZeroPadding {
                    what: "delta padding between payloads".into(),
                    offset: at,
                });
            }
            at = at.max(e);
        }
        Ok(DeltaFile {
            data,
            base_id,
            index,
            chunks,
        })
    }

    /// The identity of the base this delta needs ([`base_identity`]).
    pub fn base_id(&self) -> u64 {
        self.base_id
    }

    pub fn index(&self) -> &Index {
        &self.index
    }

    /// Size of the delta file.
    pub fn len(&self) -> usize {
        self.bytes().len()
    }

    pub fn is_empty(&self) -> bool {
        self.bytes().is_empty()
    }

    /// Refuse a base that is not the one this delta was made against.
    pub fn check_base(&self, base: &TernFile) -> Result<()> {
        let found = base_identity(base)?;
        if found != self.base_id {
            return Err(FormatError::Checksum {
                what: "delta base identity (this delta was made against a different base model: pass the base file it was created from)".into(),
                stored: self.base_id,
                computed: found,
            });
        }
        Ok(())
    }

    /// Rebuild the tuned `.tern` image in memory with [`default_threads`] workers.
    pub fn apply(&self, base: &TernFile) -> Result<Vec<u8>> {
        self.apply_with(base, default_threads())
    }

    /// Rebuild the tuned `.tern` image in memory: checks the base, decodes every tensor (chunks in
    /// parallel on `threads` workers), checks every tensor's checksum. The image is byte-identical
    /// to the tuned file the delta was made from ([`DeltaFile::apply_to_file`] also checks its hash).
    pub fn apply_with(&self, base: &TernFile, threads: usize) -> Result<Vec<u8>> {
        self.check_base(base)?;
        let t0 = std::time::Instant::now();
        let b = self.bytes();
        let idx = &self.index;
        // Resolve every base tensor first (checksums verified) — nothing is decoded before this.
        let mut base_bytes: Vec<&[u8]> = Vec::with_capacity(idx.tensors.len());
        for r in &idx.tensors {
            let Some(ck) = r.base_checksum else {
                base_bytes.push(&[]);
                continue;
            };
            let v = base.tensor(&r.info.name).map_err(|e| match e {
                FormatError::NoSuchTensor(n) => FormatError::malformed(
                    "delta base",
                    format!("tensor {n:?} is missing from the base"),
                ),
                e => e,
            })?;
            let same_size = matches!(r.method, Method::NeuZip { .. }) || v.info.size == r.info.size;
            if v.info.checksum != ck
                || v.info.encoding != r.info.encoding
                || v.info.shape != r.info.shape
                || !same_size
            {
                return Err(FormatError::Checksum {
                    what: format!(
                        "base tensor {:?} (the delta was made against a different base)",
                        r.info.name
                    ),
                    stored: ck,
                    computed: v.info.checksum,
                });
            }
            base_bytes.push(v.bytes);
        }
        let t_base = t0.elapsed();
        // Every declared size is now backed: a `chunks` record's by the base tensor of the same
        // size (checked above) or by copy bytes in the stream (checked at open); a NeuZip record's
        // re-encoded size must be within NeuZip's bound for the raw floats it encodes (their
        // count is the base's: same shape). Only then is the image allocated, fallibly.
        for r in &idx.tensors {
            if let (Method::NeuZip { .. }, Ctx::Float(w)) = (r.method, ctx_of(&r.info, r.method)?) {
                let raw = element_count(&r.info.shape)?.saturating_mul(w.bytes() as u64);
                if r.info.size > neuzip_size_bound(raw) {
                    return Err(malformed(format!(
                        "tensor {:?} declares {} bytes for {raw} bytes of floats",
                        r.info.name, r.info.size
                    )));
                }
            }
        }
        let tuned_len = usize_of(idx.tuned_size)?;
        let mut image = Vec::new();
        image.try_reserve_exact(tuned_len).map_err(|_| {
            FormatError::out_of_range(
                "delta",
                format!("cannot allocate the {tuned_len}-byte tuned image"),
            )
        })?;
        image.resize(tuned_len, 0u8);
        let d0 = usize_of(idx.data_offset)?;
        let d1 = d0 + usize_of(idx.data_size)?; // ok: validated at open to fit tuned_size
        let blob = |x: &Blob| &b[x.offset as usize..(x.offset + x.size) as usize]; // ok: validated
        let (pre, suf) = (blob(&idx.prefix), blob(&idx.suffix));
        let computed = skeleton_hash(pre, suf);
        if computed != idx.skeleton_hash {
            return Err(FormatError::Checksum {
                what: "tuned file header and tables rebuilt from the delta".into(),
                stored: idx.skeleton_hash,
                computed,
            });
        }
        image[..d0].copy_from_slice(pre);
        image[d1..].copy_from_slice(suf);
        // Split the data section into one slice per tensor (validated not to overlap).
        let mut order: Vec<usize> = (0..idx.tensors.len()).collect();
        order.sort_unstable_by_key(|&i| idx.tensors[i].info.offset);
        let mut slots: Vec<Option<&mut [u8]>> = (0..idx.tensors.len()).map(|_| None).collect();
        let mut rest: &mut [u8] = &mut image[d0..d1];
        let mut at = 0u64;
        for i in order {
            let info = &idx.tensors[i].info;
            let skip = usize_of(info.offset - at)?; // ok: sorted, non-overlapping
            let (_, r) = std::mem::take(&mut rest).split_at_mut(skip);
            let (t, r) = r.split_at_mut(usize_of(info.size)?);
            slots[i] = Some(t);
            rest = r;
            at = info.offset + info.size;
        }
        // Jobs: one per chunk of a `chunks` tensor, one per NeuZip tensor.
        enum Job<'a> {
            Chunk(u32, Ctx, &'a [u8], &'a [u8], &'a mut [u8]),
            NeuZip(usize, &'a mut [u8]),
        }
        let mut jobs = Vec::new();
        for (i, slot) in slots.into_iter().enumerate() {
            let r = &idx.tensors[i];
            let out = slot.ok_or_else(|| malformed("tensor slot missing"))?;
            match r.method {
                Method::NeuZip { .. } => jobs.push(Job::NeuZip(i, out)),
                Method::Chunks => {
                    let ctx = ctx_of(&r.info, r.method)?;
                    let mut rest: &mut [u8] = out;
                    for c in &self.chunks[i] {
                        let (o, tail) = std::mem::take(&mut rest).split_at_mut(c.out.len());
                        rest = tail;
                        let bb = if c.kind == K_COPY {
                            &[][..]
                        } else {
                            base_bytes[i]
                                .get(c.out.clone())
                                .ok_or_else(|| corrupt("chunk beyond the base tensor"))?
                        };
                        jobs.push(Job::Chunk(c.kind, ctx, &b[c.data.clone()], bb, o));
                    }
                }
            }
        }
        // Large jobs first so a big NeuZip tensor does not finish last alone.
        jobs.sort_by_key(|j| match j {
            Job::NeuZip(_, o) => std::cmp::Reverse(o.len() * 4),
            Job::Chunk(_, _, _, _, o) => std::cmp::Reverse(o.len()),
        });
        par_map(jobs, threads, |j| match j {
            Job::Chunk(kind, ctx, data, base, out) => decode_chunk(kind, ctx, data, base, out),
            Job::NeuZip(i, out) => self.decode_neuzip(i, base_bytes[i], out),
        })?;
        let t_decode = t0.elapsed();
        // Every tensor's checksum.
        let d = &image[d0..d1];
        let checks: Vec<(usize, &[u8])> = idx
            .tensors
            .iter()
            .enumerate()
            .map(|(i, r)| {
                (
                    i,
                    &d[r.info.offset as usize..(r.info.offset + r.info.size) as usize],
                )
            }) // ok: validated
            .collect();
        par_map(checks, threads, |(i, bytes)| {
            let info = &idx.tensors[i].info;
            let computed = xxh3_64(bytes);
            if computed != info.checksum {
                return Err(FormatError::Checksum {
                    what: format!("tensor {:?} rebuilt from the delta", info.name),
                    stored: info.checksum,
                    computed,
                });
            }
            Ok(())
        })?;
        log::debug!(
            "delta applied: base tensors checked {:.3}s, decoded {:.3}s, checksums {:.3}s",
            t_base.as_secs_f64(),
            (t_decode - t_base).as_secs_f64(),
            (t0.elapsed() - t_decode).as_secs_f64()
        );
        Ok(image)
    }

    fn decode_neuzip(&self, i: usize, base: &[u8], out: &mut [u8]) -> Result<()> {
        let r = &self.index.tensors[i];
        let (
            Method::NeuZip {
                lanes,
                block_symbols,
                layout,
            },
            Encoding::NeuZip {
                dtype,
                mantissa_bits,
            },
        ) = (r.method, &r.info.encoding)
        else {
            return Err(malformed("neuzip record"));
        };
        let mut binfo = r.info.clone();
        binfo.size = base.len() as u64;
        let raw_base = decode_neuzip_raw(&binfo, base)?;
        let w = float_width(*dtype);
        let mut raw = vec![0u8; raw_base.len()];
        let b = self.bytes();
        for c in &self.chunks[i] {
            let (Some(o), Some(bb)) = (raw.get_mut(c.out.clone()), raw_base.get(c.out.clone()))
            else {
                return Err(corrupt("neuzip chunk outside the tensor"));
            };
            decode_chunk(c.kind, Ctx::Float(w), &b[c.data.clone()], bb, o)?;
        }
        let row_len = usize_of(r.info.shape.last().copied().unwrap_or(1).max(1))?;
        let blob = neuzip_encode(
            layout,
            *dtype,
            *mantissa_bits,
            &raw,
            row_len,
            neuzip::Params {
                lanes,
                block_symbols,
            },
        )?;
        if blob.len() != out.len() {
            return Err(FormatError::Checksum {
                what: format!("tensor {:?} rebuilt from the delta (size)", r.info.name),
                stored: r.info.checksum,
                computed: xxh3_64(&blob),
            });
        }
        out.copy_from_slice(&blob);
        Ok(())
    }

    /// Rebuild the tuned model and open it (validated like any `.tern` file; tensors equal the
    /// delta's records).
    pub fn apply_open(&self, base: &TernFile, threads: usize) -> Result<TernFile> {
        let image = self.apply_with(base, threads)?;
        let f = TernFile::from_bytes(image)?;
        let same = f.tensors().len() == self.index.tensors.len()
            && f.tensors()
                .iter()
                .zip(&self.index.tensors)
                .all(|(a, r)| *a == r.info);
        if !same {
            return Err(malformed(
                "the rebuilt directory differs from the delta's records",
            ));
        }
        Ok(f)
    }

    /// Rebuild the tuned file at `out`; checks the whole file's hash first. Returns its size.
    pub fn apply_to_file(&self, base: &TernFile, out: &Path, threads: usize) -> Result<u64> {
        let image = self.apply_with(base, threads)?;
        let computed = xxh3_64(&image);
        if computed != self.index.tuned_hash {
            return Err(FormatError::Checksum {
                what: "tuned file rebuilt from the delta".into(),
                stored: self.index.tuned_hash,
                computed,
            });
        }
        // Written beside `out` and renamed, so a failed write does not leave half a model. The
        // caller refuses an `out` that is an input (`crate::output::refuse_input_as_output`).
        crate::output::write_atomic(out, &image)?;
        Ok(image.len() as u64)
    }

    /// Per-tensor sizes: (name, tuned bytes, payload bytes, main chunk kind name).
    pub fn tensor_sizes(&self) -> Vec<(String, u64, u64, &'static str)> {
        self.index
            .tensors
            .iter()
            .zip(&self.chunks)
            .map(|(r, ch)| {
                let mut by: HashMap<u32, usize> = HashMap::new();
                for c in ch {
                    *by.entry(c.kind).or_default() += c.out.len();
                }
                let main = by.into_iter().max_by_key(|&(k, n)| (n, k)).map(|x| x.0);
                let name = match (r.method, main) {
                    (Method::NeuZip { .. }, _) => "neuzip",
                    (_, Some(K_BASE)) => "base",
                    (_, Some(K_COPY)) | (_, None) => "copy",
                    (_, Some(K_FM16 | K_FM32)) => "fm-delta",
                    (_, Some(K_SPARSE)) => "sparse-bytes",
                    (_, Some(K_TERNARY)) => "ternary",
                    (_, Some(K_GGML)) => "ggml",
                    _ => "?",
                };
                (r.info.name.clone(), r.info.size, r.payload.size, name)
            })
            .collect()
    }
}

/// Open `base`, apply the delta at `delta`, and return the tuned model as a validated in-memory
/// [`TernFile`] (nothing written to disk).
pub fn open_with_delta(base: &Path, delta: &Path) -> Result<TernFile> {
    let base = TernFile::open(base)?;
    let d = DeltaFile::open(delta)?;
    d.apply_open(&base, default_threads())
}

/// Decode all chunks of a payload (used by [`create`] to check what it encoded).
pub(super) fn decode_chunks(
    payload: &[u8],
    chunks: &[Chunk],
    ctx: Ctx,
    base: &[u8],
    out: &mut [u8],
    threads: usize,
) -> Result<()> {
    let mut jobs = Vec::with_capacity(chunks.len());
    let mut rest: &mut [u8] = out;
    for c in chunks {
        let (o, tail) = std::mem::take(&mut rest).split_at_mut(c.out.len());
        rest = tail;
        let bb = if c.kind == K_COPY {
            &[][..]
        } else {
            base.get(c.out.clone())
                .ok_or_else(|| corrupt("chunk beyond the base tensor"))?
        };
        let data = payload
            .get(c.data.clone())
            .ok_or_else(|| corrupt("chunk data out of range"))?;
        jobs.push((c.kind, data, bb, o));
    }
    par_map(jobs, threads, |(k, d, b, o)| decode_chunk(k, ctx, d, b, o))?;
    Ok(())
}
