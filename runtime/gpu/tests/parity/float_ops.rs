//! Parity of `float_ops.rs`: the f32/f16/bf16 GEMV against plain f32 dots of the decoded rows
//! (NMSE ≤ 1e-10; a different summation order gives ~1e-13), including matrices split across
//! bindings and a NeuZip tensor decoded on the GPU and read through `float_parts` (chunks at
//! odd element offsets); the embedding lookup (float and Q8_0/Q4_0/Q4_1/Q6_K tables, bit-exact
//! with `tern_format`'s decoding, out-of-range ids → zeros); top-k (bit-exact against a sort by
//! (value desc, index asc), including ties, n < k, n = 1 and vocabularies of 49152 / 128256).

use super::*;
use tern_gpu::kernels::EmbedTable;
use tern_gpu::{FloatPart, FloatWeight};

fn run_float_gemv(
    ctx: &GpuContext,
    rng: &mut Rng,
    dtype: FloatType,
    rows: usize,
    cols: usize,
    tokens: usize,
) -> Result<String, String> {
    let w: Vec<f32> = (0..rows * cols).map(|_| rng.normal()).collect();
    let bytes = to_dtype(dtype, &w);
    let e = |e: GpuError| e.to_string();
    let fw = FloatWeight::upload(ctx, dtype, rows as u64, cols as u64, &bytes).map_err(e)?;
    check_gemv(ctx, rng, &fw, &bytes, tokens)
}

/// `fw` (holding `bytes`) times random activations against the reference.
fn check_gemv(
    ctx: &GpuContext,
    rng: &mut Rng,
    fw: &FloatWeight,
    bytes: &[u8],
    tokens: usize,
) -> Result<String, String> {
    let (rows, cols) = (fw.rows as usize, fw.cols as usize);
    // the reference multiplies the values the GPU sees (rounded to the dtype)
    let wd = Encoding::from(fw.dtype)
        .decode_f32(&[rows as u64, cols as u64], bytes)
        .map_err(|e| e.to_string())?;
    let x = activations(rng, tokens, cols);
    let e = |e: GpuError| e.to_string();
    let xb = ctx.upload("x", &f32_bytes(&x)).map_err(e)?;
    let yb = ctx.zeroed("y", (tokens * rows * 4) as u64).map_err(e)?;
    let mut enc = ctx.encoder();
    tern_gpu::kernels::float_gemv(ctx, &mut enc, fw, &xb, tokens as u64, &yb).map_err(e)?;
    let t0 = std::time::Instant::now();
    ctx.submit_wait(enc).map_err(e)?;
    let ms = t0.elapsed().as_secs_f64() * 1e3;
    let got = ctx.read_f32(&yb, tokens * rows).map_err(e)?;
    let mut want = vec![0.0f32; tokens * rows];
    for t in 0..tokens {
        for r in 0..rows {
            want[t * rows + r] = wd[r * cols..(r + 1) * cols]
                .iter()
                .zip(&x[t * cols..(t + 1) * cols])
                .map(|(a, b)| a * b)
                .sum();
        }
    }
    score("float_gemv", Check::Nmse(1e-10), &got, &want)
        .map(|s| format!("{s}, {} parts, {ms:.1} ms", fw.parts().len()))
}

/// A bf16 / f16 matrix NeuZip-coded, decoded on the GPU into its chunks' buffers, then used
/// through `NeuzipTensor::float_parts` by the GEMV and the embedding lookup.
fn run_neuzip_parts(
    ctx: &GpuContext,
    rng: &mut Rng,
    dtype: FloatType,
    rows: usize,
    cols: usize,
) -> Result<String, String> {
    let w: Vec<f32> = (0..rows * cols).map(|_| rng.normal() * 0.05).collect();
    let bytes = to_dtype(dtype, &w);
    // small blocks (whole rows each), so that the 64 KiB binding limit cuts several chunks
    let params = neuzip::Params {
        lanes: 8,
        block_symbols: 2000,
    };
    let blob = neuzip::encode_with(dtype, 7, &bytes, cols, params).map_err(|e| e.to_string())?;
    let e = |e: GpuError| e.to_string();
    let t = NeuzipTensor::upload(ctx, &blob).map_err(e)?;
    let mut enc = ctx.encoder();
    t.decode(ctx, &mut enc).map_err(e)?;
    ctx.submit_wait(enc).map_err(e)?;
    t.check_status(ctx).map_err(e)?;
    let parts = t.float_parts(cols as u64).map_err(e)?;
    let odd = parts.iter().filter(|p| p.elem_offset % 2 == 1).count();
    let n_parts = parts.len();
    let fw = FloatWeight::from_parts(dtype, rows as u64, cols as u64, parts).map_err(e)?;
    let decoded = neuzip::decode(&blob).map_err(|e| e.to_string())?;
    let g = check_gemv(ctx, rng, &fw, &decoded, 2)?;
    let ids: Vec<u32> = (0..9).map(|i| (i * 97 % rows) as u32).collect();
    let emb = check_embed(
        ctx,
        &EmbedTable::Float(&fw),
        &decoded,
        Encoding::from(dtype),
        &ids,
    )?;
    Ok(format!(
        "{n_parts} parts ({odd} at odd element offsets); gemv {g}; embed {emb}"
    ))
}

/// A matrix in hand-made parts: each part's buffer starts with `pad` junk elements (odd, so the
/// 16-bit rows start mid-word) and ends mid-word; the GEMV and the lookup read it through
/// `FloatWeight::from_parts`.
fn run_offset_parts(
    ctx: &GpuContext,
    rng: &mut Rng,
    dtype: FloatType,
    rows: usize,
    cols: usize,
) -> Result<String, String> {
    let w: Vec<f32> = (0..rows * cols).map(|_| rng.normal()).collect();
    let bytes = to_dtype(dtype, &w);
    let es = dtype.size();
    let cuts = [0, rows / 3, rows / 3 + 1, rows];
    let e = |e: GpuError| e.to_string();
    let mut parts = Vec::new();
    for (i, win) in cuts.windows(2).enumerate() {
        let pad = 2 * i + 1;
        let mut data = to_dtype(dtype, &vec![1e30; pad]);
        data.extend_from_slice(&bytes[win[0] * cols * es..win[1] * cols * es]);
        data.resize(data.len().next_multiple_of(4), 0xff);
        parts.push(FloatPart {
            buffer: ctx.upload("part", &data).map_err(e)?,
            row0: win[0] as u64,
            rows: (win[1] - win[0]) as u64,
            elem_offset: pad as u64,
        });
    }
    let fw = FloatWeight::from_parts(dtype, rows as u64, cols as u64, parts).map_err(e)?;
    let g = check_gemv(ctx, rng, &fw, &bytes, 2)?;
    let ids: Vec<u32> = (0..rows as u32).chain([rows as u32]).collect();
    let emb = check_embed(
        ctx,
        &EmbedTable::Float(&fw),
        &bytes,
        Encoding::from(dtype),
        &ids,
    )?;
    Ok(format!("gemv {g}; embed {emb}"))
}

/// Look `ids` up in `table` (holding `bytes` of `encoding`) and compare bit for bit with the
/// format's decoding (ids past the table → zeros).
fn check_embed(
    ctx: &GpuContext,
    table: &EmbedTable<'_>,
    bytes: &[u8],
    encoding: Encoding,
    ids: &[u32],
) -> Result<String, String> {
    let (rows, cols) = (table.rows() as usize, table.cols() as usize);
    let all = encoding
        .decode_f32(&[rows as u64, cols as u64], bytes)
        .map_err(|e| e.to_string())?;
    let mut want = vec![0.0f32; ids.len() * cols];
    for (i, &id) in ids.iter().enumerate() {
        if (id as usize) < rows {
            let r = id as usize;
            want[i * cols..(i + 1) * cols].copy_from_slice(&all[r * cols..(r + 1) * cols]);
        }
    }
    let e = |e: GpuError| e.to_string();
    let idb = ctx
        .upload(
            "ids",
            &ids.iter().flat_map(|i| i.to_le_bytes()).collect::<Vec<_>>(),
        )
        .map_err(e)?;
    let ob = ctx
        .zeroed("out", (ids.len() * cols * 4) as u64)
        .map_err(e)?;
    // poison the output so that skipped writes show
    ctx.write(&ob, &f32_bytes(&vec![f32::NAN; ids.len() * cols]));
    let mut enc = ctx.encoder();
    tern_gpu::kernels::embed_rows(ctx, &mut enc, table, &idb, ids.len() as u64, &ob).map_err(e)?;
    ctx.submit_wait(enc).map_err(e)?;
    let got = ctx.read_f32(&ob, ids.len() * cols).map_err(e)?;
    score("embed_rows", Check::Exact, &got, &want)
}

pub(super) fn run_embed(
    ctx: &GpuContext,
    rng: &mut Rng,
    src: Result<FloatType, GgmlType>,
    rows: usize,
    cols: usize,
) -> Result<String, String> {
    let mut ids: Vec<u32> = vec![0, (rows - 1) as u32, (rows / 2) as u32, 0];
    for _ in 0..5 {
        ids.push((rng.next() % rows as u64) as u32);
    }
    ids.push(rows as u32); // out of range → zeros
    ids.push(u32::MAX);
    let e = |e: GpuError| e.to_string();
    match src {
        Ok(dt) => {
            let w: Vec<f32> = (0..rows * cols).map(|_| rng.normal()).collect();
            let bytes = to_dtype(dt, &w);
            let fw = FloatWeight::upload(ctx, dt, rows as u64, cols as u64, &bytes).map_err(e)?;
            let s = check_embed(
                ctx,
                &EmbedTable::Float(&fw),
                &bytes,
                Encoding::from(dt),
                &ids,
            )?;
            Ok(format!("{s}, {} parts", fw.parts().len()))
        }
        Err(q) => {
            let n_blocks = rows * cols / q.block_elems() as usize;
            let bytes = random_blocks(rng, q, n_blocks);
            let gw = GgmlWeight::upload(ctx, q, rows as u64, cols as u64, &bytes).map_err(e)?;
            let s = check_embed(ctx, &EmbedTable::Ggml(&gw), &bytes, ggml_encoding(q), &ids)?;
            Ok(format!("{s}, {} parts", gw.parts()))
        }
    }
}

/// Plain CPU top-k: sort by (value desc, index asc), NaN skipped (−0 and +0 compare equal, as
/// on the GPU), padded with (MAX, -inf).
fn topk_reference(logits: &[f32], k: usize) -> Vec<(u32, f32)> {
    let mut v: Vec<(u32, f32)> = logits
        .iter()
        .enumerate()
        .filter(|(_, x)| !x.is_nan())
        .map(|(i, &x)| (i as u32, x))
        .collect();
    v.sort_by(|a, b| {
        b.1.partial_cmp(&a.1)
            .unwrap_or(std::cmp::Ordering::Equal)
            .then(a.0.cmp(&b.0))
    });
    v.truncate(k);
    v.resize(k, (u32::MAX, f32::NEG_INFINITY));
    v
}

/// `ties`: 0 distinct values, 1 few distinct values plus NaN/±inf, 2 all equal (±0 alternating).
fn run_topk(ctx: &GpuContext, rng: &mut Rng, n: usize, k: u32, ties: u8) -> Result<String, String> {
    let mut logits: Vec<f32> = (0..n).map(|_| rng.normal() * 3.0).collect();
    if ties == 2 {
        for (i, x) in logits.iter_mut().enumerate() {
            *x = if i % 2 == 0 { 0.0 } else { -0.0 };
        }
    }
    if ties == 1 {
        // few distinct values: many ties, decided by index
        for x in &mut logits {
            *x = (*x).round();
        }
        if n > 10 {
            logits[3] = f32::NAN;
            logits[n - 1] = f32::INFINITY;
            logits[n / 2] = f32::NEG_INFINITY;
        }
    }
    let want = topk_reference(&logits, k as usize);
    let e = |e: GpuError| e.to_string();
    let lb = ctx.upload("logits", &f32_bytes(&logits)).map_err(e)?;
    let ob = ctx.zeroed("topk", u64::from(k) * 8).map_err(e)?;
    let mut enc = ctx.encoder();
    tern_gpu::kernels::topk(ctx, &mut enc, &lb, n as u64, k, &ob).map_err(e)?;
    let t0 = std::time::Instant::now();
    ctx.submit_wait(enc).map_err(e)?;
    let ms = t0.elapsed().as_secs_f64() * 1e3;
    let got = ctx.read_u32(&ob, 2 * k as usize).map_err(e)?;
    for (j, w) in want.iter().enumerate() {
        let (gi, gv) = (got[2 * j], got[2 * j + 1]);
        if gi != w.0 || gv != w.1.to_bits() {
            return Err(format!(
                "slot {j}: gpu ({gi}, {}) vs reference ({}, {})",
                f32::from_bits(gv),
                w.0,
                w.1
            ));
        }
    }
    Ok(format!("bit-exact, {ms:.1} ms"))
}

pub fn cases() -> Vec<(String, bool, CaseFn)> {
    let mut v: Vec<(String, bool, CaseFn)> = Vec::new();
    for dt in [FloatType::F32, FloatType::F16, FloatType::Bf16] {
        for (rows, cols, tokens, split) in [
            (1, 1, 1, false),
            (33, 31, 2, false),
            (257, 576, 1, false),
            (70, 2560, 3, false),
            (300, 100, 2, true),
            (700, 100, 1, true),
        ] {
            v.push((
                format!("float_gemv {dt:?} {rows}×{cols}×{tokens}"),
                split,
                Box::new(move |c, r| run_float_gemv(c, r, dt, rows, cols, tokens)),
            ));
        }
    }
    v.push((
        "float_gemv Bf16 4096×576×1 (lm-head slice)".into(),
        false,
        Box::new(|c, r| run_float_gemv(c, r, FloatType::Bf16, 4096, 576, 1)),
    ));
    for (dt, rows, cols) in [
        (FloatType::Bf16, 600, 96),
        (FloatType::F16, 301, 75),
        (FloatType::Bf16, 1000, 33),
        (FloatType::F16, 1500, 45),
    ] {
        v.push((
            format!("float parts from NeuZip {dt:?} {rows}×{cols} split"),
            true,
            Box::new(move |c, r| run_neuzip_parts(c, r, dt, rows, cols)),
        ));
    }
    for dt in [FloatType::F32, FloatType::F16, FloatType::Bf16] {
        for (rows, cols) in [(7, 37), (10, 64), (3, 1)] {
            v.push((
                format!("float parts at odd offsets {dt:?} {rows}×{cols}"),
                false,
                Box::new(move |c, r| run_offset_parts(c, r, dt, rows, cols)),
            ));
        }
    }
    let float = [FloatType::F32, FloatType::F16, FloatType::Bf16].map(Ok);
    let ggml = [GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q4_1].map(Err);
    for src in float.into_iter().chain(ggml) {
        for (rows, cols, split) in [(1, 32, false), (100, 96, false), (700, 576, true)] {
            v.push((
                format!("embed_rows {src:?} {rows}×{cols}"),
                split,
                Box::new(move |c, r| run_embed(c, r, src, rows, cols)),
            ));
        }
    }
    for (rows, cols, split) in [(3, 256, false), (200, 512, true)] {
        v.push((
            format!("embed_rows Q6K {rows}×{cols}"),
            split,
            Box::new(move |c, r| run_embed(c, r, Err(GgmlType::Q6K), rows, cols)),
        ));
    }
    for (n, k, ties) in [
        (1, 1, 0),
        (1, 40, 0),
        (5, 64, 0),
        (100, 8, 1),
        (2048, 64, 0),
        (2049, 64, 1),
        (5000, 1, 1),
        (5000, 64, 2),
        (49152, 40, 0),
        (49152, 64, 1),
        (49152, 33, 2),
        (128256, 64, 0),
        (128256, 50, 1),
    ] {
        let what = ["", " ties/NaN/±inf", " all equal ±0"][ties as usize];
        v.push((
            format!("topk n={n} k={k}{what}"),
            false,
            Box::new(move |c, r| run_topk(c, r, n, k, ties)),
        ));
    }
    v
}
