//! The op-parity harness: every GPU kernel against its `tern-reference` (or `tern-format`)
//! counterpart over one table of cases.
//!
//! Scoring. Integer and decoder paths (INT8 activation quantization, ternary GEMV with INT8
//! activations, NeuZip decode, argmax) are compared **bit for bit**. Float paths use
//! NMSE = Σ(gpu − ref)² / Σ ref² with tolerance 1e-6 (ggml GEMV, RMSNorm, SwiGLU: a different f32
//! summation order or `exp` gives ~1e-14; 1e-6 leaves room for drivers that contract into FMAs
//! and still catches any real indexing/dequantization bug, which gives NMSE ≥ ~1e-3). Where the
//! kernel performs the reference's exact operations (ReLU² GLU, add, RoPE with host cos/sin),
//! the table asks for bit-exactness too.
//!
//! Shapes: 1 row / 1 column, sizes that are not multiples of the workgroup (31, 33, 257, 1000),
//! several tokens (GEMM), and cases run on a context whose binding limit is forced down to
//! 64 KiB so weights and NeuZip blobs are split across bindings (what a > 128 MiB tensor does on
//! a phone) without allocating 128 MiB on lavapipe.
//!
//! No adapter: the tests print why and pass, unless `TERN_REQUIRE_GPU=1` (set in CI, where
//! lavapipe is installed), then they fail.

use tern_format::{neuzip, ternary, ActQuant, Encoding, FloatType, TernaryLayout};
use tern_gpu::kernels::{self, act_stride_words};
use tern_gpu::{EltOp, GgmlType, GpuContext, GpuError, GpuOptions};
use tern_gpu::{GemmTileChoice, GemvKernel};
use tern_gpu::{GgmlWeight, NeuzipTensor, TernaryWeight};
use tern_reference::{MatmulOptions, Matrix};

#[path = "parity/a48.rs"]
mod a48;
#[path = "parity/attn.rs"]
mod attn;
#[path = "parity/cce.rs"]
mod cce;
#[path = "parity/decode.rs"]
mod decode;
#[path = "parity/family.rs"]
mod family;
#[path = "parity/float_ops.rs"]
mod float_ops;
#[path = "parity/fused.rs"]
mod fused;
#[path = "parity/gate_up.rs"]
mod gate_up;
#[path = "parity/gemm.rs"]
mod gemm;
#[path = "parity/ggml_norm.rs"]
mod ggml_norm;
#[path = "parity/kquants.rs"]
mod kquants;
#[path = "parity/kv.rs"]
mod kv;
#[path = "parity/minicache.rs"]
mod minicache;
#[path = "parity/neuzip_gemv.rs"]
mod neuzip_gemv;
#[path = "parity/rope_kv.rs"]
mod rope_kv;
#[path = "parity/sample.rs"]
mod sample;
#[path = "parity/topk_fused.rs"]
mod topk_fused;

const SPLIT_LIMIT: u64 = 64 << 10;

/// The launchers' default kernel picks (`GpuTuning::default()`'s `gemv` and `gemm_tile`).
const AUTO_PICK: (GemvKernel, GemmTileChoice) = (GemvKernel::Auto, GemmTileChoice::Auto);

fn context(binding_limit: Option<u64>) -> Option<GpuContext> {
    match GpuContext::with_options(GpuOptions {
        binding_limit,
        ..GpuOptions::default()
    }) {
        Ok(c) => {
            let line = format!(
                "adapter: {} ({}, {}; {}), binding limit {}",
                c.info.name,
                c.info.backend,
                c.info.device_type,
                c.info.driver,
                c.binding_limit()
            );
            eprintln!("{line}");
            tern_tests::expect_backend(&line);
            Some(c)
        }
        Err(e) => {
            if tern_tests::gpu_required("gpu_parity") {
                panic!("TERN_REQUIRE_GPU=1 or CI=true but no usable GPU adapter: {e}");
            }
            eprintln!("skipping GPU parity: {e}");
            None
        }
    }
}

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 >> 33
    }
    fn unit(&mut self) -> f32 {
        (self.next() % (1 << 24)) as f32 / (1 << 24) as f32
    }
    /// Roughly normal, sd ≈ 1.
    fn normal(&mut self) -> f32 {
        (0..4).map(|_| self.unit()).sum::<f32>() * 1.7 - 3.4
    }
}

fn nmse(gpu: &[f32], reference: &[f32]) -> f64 {
    assert_eq!(gpu.len(), reference.len());
    let num: f64 = gpu
        .iter()
        .zip(reference)
        .map(|(a, b)| (f64::from(*a) - f64::from(*b)).powi(2))
        .sum();
    let den: f64 = reference.iter().map(|b| f64::from(*b).powi(2)).sum();
    if den == 0.0 {
        num
    } else {
        num / den
    }
}

#[derive(Clone, Copy)]
enum Check {
    Exact,
    Nmse(f64),
}

fn score(name: &str, check: Check, gpu: &[f32], reference: &[f32]) -> Result<String, String> {
    if gpu.len() != reference.len() {
        return Err(format!(
            "{name}: {} values vs {}",
            gpu.len(),
            reference.len()
        ));
    }
    match check {
        Check::Exact => {
            let bad = gpu
                .iter()
                .zip(reference)
                .position(|(a, b)| a.to_bits() != b.to_bits());
            match bad {
                None => Ok("bit-exact".into()),
                Some(i) => Err(format!(
                    "{name}: element {i}: gpu {} ({:#x}) vs reference {} ({:#x}); nmse {:.2e}",
                    gpu[i],
                    gpu[i].to_bits(),
                    reference[i],
                    reference[i].to_bits(),
                    nmse(gpu, reference)
                )),
            }
        }
        Check::Nmse(tol) => {
            let e = nmse(gpu, reference);
            if e <= tol && gpu.iter().all(|v| !v.is_nan()) {
                Ok(format!("nmse {e:.2e}"))
            } else {
                Err(format!("{name}: nmse {e:.3e} > {tol:.0e}"))
            }
        }
    }
}

fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// Activations for `tokens` rows of `cols`: normal values, one outlier per row, and (when more
/// than one token) an all-zero last row.
fn activations(rng: &mut Rng, tokens: usize, cols: usize) -> Vec<f32> {
    let mut x: Vec<f32> = (0..tokens * cols).map(|_| rng.normal()).collect();
    for t in 0..tokens {
        let i = t * cols + (rng.next() as usize % cols);
        x[i] *= 8.0;
    }
    if tokens > 1 {
        for v in &mut x[(tokens - 1) * cols..] {
            *v = 0.0;
        }
    }
    x
}

// ---------------------------------------------------------------------------------------------

fn run_act_quant(
    ctx: &GpuContext,
    rng: &mut Rng,
    tokens: usize,
    cols: usize,
) -> Result<String, String> {
    let mut x = activations(rng, tokens, cols);
    if cols > 4 {
        x[2] = f32::NAN; // ignored by the max, quantizes to 0
        x[3] = 1e-40; // subnormal
    }
    // ties: a value that lands exactly on .5 after scaling (amax 127 → s = 1)
    if tokens > 1 && cols >= 3 {
        let r = &mut x[0..cols];
        r.iter_mut().for_each(|v| *v = v.clamp(-100.0, 100.0));
        r[0] = 127.0;
        r[1] = 2.5;
        r[cols - 1] = -3.5;
    }
    let xb = ctx.upload("x", &f32_bytes(&x)).map_err(|e| e.to_string())?;
    let mut enc = ctx.encoder();
    let a = kernels::quantize_act_int8(ctx, &mut enc, &xb, tokens as u64, cols as u64)
        .map_err(|e| e.to_string())?;
    ctx.submit_wait(enc).map_err(|e| e.to_string())?;
    let stride = act_stride_words(cols as u64) as usize;
    let q = ctx
        .read_bytes(&a.q, 0, (tokens * stride * 4) as u64)
        .map_err(|e| e.to_string())?;
    let s = ctx.read_f32(&a.s, tokens).map_err(|e| e.to_string())?;
    for t in 0..tokens {
        let mut want = vec![0i8; cols];
        let ws =
            tern_reference::quantize_act_int8(&x[t * cols..(t + 1) * cols], &mut want).unwrap();
        if ws.to_bits() != s[t].to_bits() {
            return Err(format!("token {t}: scale {} vs reference {ws}", s[t]));
        }
        let row = &q[t * stride * 4..(t + 1) * stride * 4];
        for c in 0..cols {
            if row[c] as i8 != want[c] {
                return Err(format!(
                    "token {t} col {c}: {} vs reference {}",
                    row[c] as i8, want[c]
                ));
            }
        }
        if row[cols..].iter().any(|&b| b != 0) {
            return Err(format!("token {t}: padding not zero"));
        }
    }
    Ok("bit-exact".into())
}

#[allow(clippy::too_many_arguments)]
fn run_ternary(
    ctx: &GpuContext,
    rng: &mut Rng,
    layout: TernaryLayout,
    scale_type: FloatType,
    rows: usize,
    cols: usize,
    group: u32,
    tokens: usize,
) -> Result<String, String> {
    let trits: Vec<i8> = (0..rows * cols)
        .map(|_| (rng.next() % 3) as i8 - 1)
        .collect();
    let ns = ternary::scale_count(rows as u64, cols as u64, group).unwrap() as usize;
    let scales: Vec<f32> = (0..ns).map(|_| 0.01 + rng.unit() * 0.5).collect();
    let bytes = ternary::pack(
        layout,
        rows as u64,
        cols as u64,
        &trits,
        group,
        scale_type,
        &scales,
    )
    .unwrap();
    let enc_t = Encoding::Ternary {
        layout,
        group,
        scale_type,
    };
    let m = Matrix::from_encoded("w", rows, cols, &enc_t, &bytes).unwrap();
    let x = activations(rng, tokens, cols);
    let mut want = vec![0f32; tokens * rows];
    m.matmul(&x, ActQuant::Int8, &MatmulOptions::default(), &mut want)
        .unwrap();

    let w = TernaryWeight::upload(
        ctx,
        layout,
        rows as u64,
        cols as u64,
        group,
        scale_type,
        &bytes,
    )
    .map_err(|e| e.to_string())?;
    let xb = ctx.upload("x", &f32_bytes(&x)).map_err(|e| e.to_string())?;
    let y = ctx
        .zeroed("y", (tokens * rows * 4) as u64)
        .map_err(|e| e.to_string())?;
    let mut enc = ctx.encoder();
    let a = kernels::quantize_act_int8(ctx, &mut enc, &xb, tokens as u64, cols as u64)
        .map_err(|e| e.to_string())?;
    kernels::ternary_gemv(ctx, &mut enc, &w, &a, &y).map_err(|e| e.to_string())?;
    ctx.submit_wait(enc).map_err(|e| e.to_string())?;
    let got = ctx.read_f32(&y, tokens * rows).map_err(|e| e.to_string())?;
    score("ternary", Check::Exact, &got, &want).map(|s| format!("{s}, {} binding(s)", w.parts()))
}

/// Random ggml blocks: f16 scale(s) in a sane range, random quants. Q6_K: random 6-bit quants
/// and i8 sub-block scales, a small finite f16 `d` last (as llama-quantize's outputs look).
fn random_blocks(rng: &mut Rng, qtype: GgmlType, n_blocks: usize) -> Vec<u8> {
    let mut out = Vec::new();
    // Q5_0, Q5_1, IQ4_NL and Q2_K..Q5_K: random bytes (every scale, min and high-bit pattern),
    // their f16 fields (byte offsets from ggml-common.h's block structs) set to small finite values.
    let f16_fields: &[usize] = match qtype {
        GgmlType::Q5_0 | GgmlType::Iq4Nl => &[0],
        GgmlType::Q5_1 | GgmlType::Q4K | GgmlType::Q5K => &[0, 2],
        GgmlType::Q2K => &[80, 82],
        GgmlType::Q3K => &[108],
        _ => &[],
    };
    if !f16_fields.is_empty() {
        for _ in 0..n_blocks {
            let b0 = out.len();
            out.extend((0..qtype.block_bytes()).map(|_| rng.next() as u8));
            for &o in f16_fields {
                let v = half::f16::from_f32((rng.unit() - 0.5) * 0.02);
                out[b0 + o..b0 + o + 2].copy_from_slice(&v.to_le_bytes());
            }
        }
        return out;
    }
    for _ in 0..n_blocks {
        if qtype == GgmlType::Q6K {
            for _ in 0..208 {
                out.push(rng.next() as u8);
            }
            let d = half::f16::from_f32(0.0001 + rng.unit() * 0.001);
            out.extend_from_slice(&d.to_le_bytes());
            continue;
        }
        let d = half::f16::from_f32(0.001 + rng.unit() * 0.05).to_le_bytes();
        out.extend_from_slice(&d);
        let (extra, nq) = match qtype {
            GgmlType::Q8_0 => (None, 32),
            GgmlType::Q4_0 => (None, 16),
            GgmlType::Q4_1 => (Some(half::f16::from_f32(-0.2 + rng.unit() * 0.1)), 16),
            // Q6_K handled above; the ternary ggml types have no GPU kernel (not generated).
            _ => (None, 0),
        };
        if let Some(m) = extra {
            out.extend_from_slice(&m.to_le_bytes());
        }
        for _ in 0..nq {
            out.push(rng.next() as u8);
        }
    }
    out
}

fn ggml_encoding(q: GgmlType) -> Encoding {
    Encoding::from_ggml_block(q).expect("a ggml type tern stores as blocks")
}

fn run_ggml_bytes(
    ctx: &GpuContext,
    rng: &mut Rng,
    qtype: GgmlType,
    rows: usize,
    cols: usize,
    tokens: usize,
    bytes: &[u8],
) -> Result<String, String> {
    let m = Matrix::from_encoded("w", rows, cols, &ggml_encoding(qtype), bytes).unwrap();
    let x = activations(rng, tokens, cols);
    let mut want = vec![0f32; tokens * rows];
    m.matmul(&x, ActQuant::None, &MatmulOptions::default(), &mut want)
        .unwrap();
    let w = GgmlWeight::upload(ctx, qtype, rows as u64, cols as u64, bytes)
        .map_err(|e| e.to_string())?;
    let xb = ctx.upload("x", &f32_bytes(&x)).map_err(|e| e.to_string())?;
    let y = ctx
        .zeroed("y", (tokens * rows * 4) as u64)
        .map_err(|e| e.to_string())?;
    let mut enc = ctx.encoder();
    kernels::ggml_gemv(ctx, &mut enc, &w, &xb, tokens as u64, &y).map_err(|e| e.to_string())?;
    ctx.submit_wait(enc).map_err(|e| e.to_string())?;
    let got = ctx.read_f32(&y, tokens * rows).map_err(|e| e.to_string())?;
    score("ggml", Check::Nmse(1e-6), &got, &want).map(|s| format!("{s}, {} binding(s)", w.parts()))
}

fn run_ggml(
    ctx: &GpuContext,
    rng: &mut Rng,
    qtype: GgmlType,
    rows: usize,
    cols: usize,
    tokens: usize,
) -> Result<String, String> {
    let bytes = random_blocks(rng, qtype, rows * cols / qtype.block_elems() as usize);
    run_ggml_bytes(ctx, rng, qtype, rows, cols, tokens, &bytes)
}

/// Raw little-endian elements of `dtype` from f32 values.
fn to_dtype(dtype: FloatType, v: &[f32]) -> Vec<u8> {
    match dtype {
        FloatType::F32 => f32_bytes(v),
        FloatType::F16 => v
            .iter()
            .flat_map(|x| half::f16::from_f32(*x).to_le_bytes())
            .collect(),
        FloatType::Bf16 => v
            .iter()
            .flat_map(|x| half::bf16::from_f32(*x).to_le_bytes())
            .collect(),
    }
}

fn run_neuzip_blob(ctx: &GpuContext, blob: &[u8]) -> Result<String, String> {
    let want = neuzip::decode(blob).map_err(|e| format!("cpu decode: {e}"))?;
    let t = NeuzipTensor::upload(ctx, blob).map_err(|e| e.to_string())?;
    let got = t.decode_to_host(ctx).map_err(|e| e.to_string())?;
    if got.len() != want.len() {
        return Err(format!("{} bytes vs {}", got.len(), want.len()));
    }
    if let Some(i) = got.iter().zip(&want).position(|(a, b)| a != b) {
        return Err(format!("byte {i} differs: {} vs {}", got[i], want[i]));
    }
    Ok(format!(
        "bit-exact, {} elements, {} blocks × {} lanes, {} chunk(s)",
        t.plan.n_elements,
        t.plan.n_blocks,
        t.plan.lanes,
        t.chunks()
    ))
}

#[allow(clippy::too_many_arguments)]
fn run_neuzip(
    ctx: &GpuContext,
    rng: &mut Rng,
    dtype: FloatType,
    k: u8,
    rows: usize,
    cols: usize,
    params: Option<neuzip::Params>,
    specials: bool,
) -> Result<String, String> {
    let mut v: Vec<f32> = (0..rows * cols).map(|_| rng.normal() * 0.05).collect();
    if specials && v.len() >= 8 {
        let sp = [
            0.0,
            -0.0,
            f32::INFINITY,
            f32::NEG_INFINITY,
            1e-40,
            -3e-39,
            65504.0,
            1e30,
        ];
        for (i, s) in sp.iter().enumerate() {
            let j = (i * 7919) % v.len();
            v[j] = *s;
        }
    }
    let data = to_dtype(dtype, &v);
    let blob = match params {
        Some(p) => neuzip::encode_with(dtype, k, &data, cols, p),
        None => neuzip::encode(dtype, k, &data, cols),
    }
    .map_err(|e| format!("encode: {e}"))?;
    run_neuzip_blob(ctx, &blob)
}

/// A damaged layout-2 word stream (structure intact) in one block of several: the decode
/// kernel's lanes flag it (whole-word 16-bit output, f32 output), and the intact blob decodes.
fn run_neuzip_v2_corrupt(
    ctx: &GpuContext,
    rng: &mut Rng,
    dtype: FloatType,
) -> Result<String, String> {
    let (rows, cols) = (24, 640);
    let v: Vec<f32> = (0..rows * cols).map(|_| rng.normal() * 0.05).collect();
    let p = neuzip::Params {
        lanes: 32,
        block_symbols: 1280,
    };
    let k = if dtype == FloatType::F32 { 23 } else { 7 };
    let good = neuzip::encode_v2_with(dtype, k, &to_dtype(dtype, &v), cols, p)
        .map_err(|e| format!("encode: {e}"))?;
    let plan = neuzip::Plan::parse(&good).map_err(|e| e.to_string())?;
    if plan.n_blocks < 3 {
        return Err(format!("{} blocks", plan.n_blocks));
    }
    run_neuzip_blob(ctx, &good)?;
    let mut blob = good;
    let b = plan.n_blocks / 2;
    let at = plan.words.offset as usize
        + 2 * plan.block_word_base(&blob, b).map_err(|e| e.to_string())? as usize
        + 6;
    let byte = blob.get_mut(at).ok_or("word offset past the blob")?;
    *byte ^= 0x5A;
    if neuzip::decode(&blob).is_ok() {
        return Err("the CPU accepts the damaged stream".into());
    }
    let t = NeuzipTensor::upload(ctx, &blob).map_err(|e| e.to_string())?;
    match t.decode_to_host(ctx) {
        Err(GpuError::Corrupt { .. }) => Ok(format!(
            "corrupt stream flagged (block {b} of {})",
            plan.n_blocks
        )),
        r => Err(format!(
            "decode of a damaged stream: {:?}",
            r.map(|o| o.len())
        )),
    }
}

/// Layout 2 (`neuzip::encode_v2*`): groups of 4 symbols per lane, whole-word 16-bit output when
/// every block starts on an even element, OR-ed halves otherwise.
#[allow(clippy::too_many_arguments)]
fn run_neuzip_v2(
    ctx: &GpuContext,
    rng: &mut Rng,
    dtype: FloatType,
    k: u8,
    rows: usize,
    cols: usize,
    params: Option<neuzip::Params>,
) -> Result<String, String> {
    let mut v: Vec<f32> = (0..rows * cols).map(|_| rng.normal() * 0.05).collect();
    for (i, s) in [0.0, -0.0, f32::INFINITY, 1e-40, -3e-39, 65504.0]
        .iter()
        .enumerate()
    {
        if let Some(x) = v.get_mut(i * 13) {
            *x = *s;
        }
    }
    let data = to_dtype(dtype, &v);
    let blob = match params {
        Some(p) => neuzip::encode_v2_with(dtype, k, &data, cols, p),
        None => neuzip::encode_v2(dtype, k, &data, cols),
    }
    .map_err(|e| format!("encode: {e}"))?;
    let plan = neuzip::Plan::parse(&blob).map_err(|e| e.to_string())?;
    if plan.version != 2 {
        return Err(format!("layout {}", plan.version));
    }
    run_neuzip_blob(ctx, &blob)
}

fn run_rmsnorm(ctx: &GpuContext, rng: &mut Rng, rows: usize, n: usize) -> Result<String, String> {
    let x: Vec<f32> = (0..rows * n).map(|_| rng.normal()).collect();
    let w: Vec<f32> = (0..n).map(|_| 0.5 + rng.unit()).collect();
    let mut want = vec![0f32; rows * n];
    tern_reference::rmsnorm(&x, &w, 1e-5, &mut want).unwrap();
    let xb = ctx.upload("x", &f32_bytes(&x)).map_err(|e| e.to_string())?;
    let wb = ctx.upload("w", &f32_bytes(&w)).map_err(|e| e.to_string())?;
    let out = ctx
        .zeroed("out", (rows * n * 4) as u64)
        .map_err(|e| e.to_string())?;
    let mut enc = ctx.encoder();
    kernels::rmsnorm(ctx, &mut enc, &xb, &wb, &out, n as u64, rows as u64, 1e-5)
        .map_err(|e| e.to_string())?;
    ctx.submit_wait(enc).map_err(|e| e.to_string())?;
    let got = ctx.read_f32(&out, rows * n).map_err(|e| e.to_string())?;
    score("rmsnorm", Check::Nmse(1e-6), &got, &want)
}

#[allow(clippy::too_many_arguments)]
fn run_rope(
    ctx: &GpuContext,
    rng: &mut Rng,
    n_heads: usize,
    head_dim: usize,
    rope_dim: usize,
    positions: &[u64],
    neox: bool,
) -> Result<String, String> {
    let per = n_heads * head_dim;
    let x: Vec<f32> = (0..positions.len() * per).map(|_| rng.normal()).collect();
    let mut want = x.clone();
    for (t, &pos) in positions.iter().enumerate() {
        tern_reference::rope(
            &mut want[t * per..(t + 1) * per],
            n_heads,
            head_dim,
            rope_dim,
            pos as usize,
            10000.0,
            neox,
        )
        .unwrap();
    }
    let xb = ctx.upload("x", &f32_bytes(&x)).map_err(|e| e.to_string())?;
    let mut enc = ctx.encoder();
    kernels::rope(
        ctx,
        &mut enc,
        &xb,
        n_heads as u64,
        head_dim as u64,
        rope_dim as u64,
        positions,
        10000.0,
        neox,
    )
    .map_err(|e| e.to_string())?;
    ctx.submit_wait(enc).map_err(|e| e.to_string())?;
    let got = ctx.read_f32(&xb, x.len()).map_err(|e| e.to_string())?;
    // Same operations as the reference; exact unless the driver contracts into FMAs.
    score("rope", Check::Nmse(1e-12), &got, &want)
}

fn run_elementwise(ctx: &GpuContext, rng: &mut Rng, op: EltOp, n: usize) -> Result<String, String> {
    let a: Vec<f32> = (0..n).map(|_| rng.normal() * 3.0).collect();
    let b: Vec<f32> = (0..n).map(|_| rng.normal()).collect();
    let mut want = vec![0f32; n];
    let check = match op {
        EltOp::SwiGlu => {
            tern_reference::swiglu(&a, &b, &mut want).unwrap();
            Check::Nmse(1e-6)
        }
        EltOp::Relu2Glu => {
            tern_reference::relu2_glu(&a, &b, &mut want).unwrap();
            Check::Exact
        }
        EltOp::Add => {
            for ((o, x), y) in want.iter_mut().zip(&a).zip(&b) {
                *o = x + y;
            }
            Check::Exact
        }
        EltOp::GeGlu => {
            tern_reference::kernels::geglu(&a, &b, &mut want).unwrap();
            Check::Nmse(1e-6)
        }
    };
    let ab = ctx.upload("a", &f32_bytes(&a)).map_err(|e| e.to_string())?;
    let bb = ctx.upload("b", &f32_bytes(&b)).map_err(|e| e.to_string())?;
    let out = ctx
        .zeroed("out", (n * 4) as u64)
        .map_err(|e| e.to_string())?;
    let mut enc = ctx.encoder();
    kernels::elementwise(ctx, &mut enc, op, &ab, &bb, &out, n as u64).map_err(|e| e.to_string())?;
    ctx.submit_wait(enc).map_err(|e| e.to_string())?;
    let got = ctx.read_f32(&out, n).map_err(|e| e.to_string())?;
    score("elementwise", check, &got, &want)
}

fn run_argmax(ctx: &GpuContext, rng: &mut Rng, rows: usize, n: usize) -> Result<String, String> {
    let mut x: Vec<f32> = (0..rows * n)
        .map(|_| (rng.next() % 1000) as f32 * 0.01)
        .collect();
    if n > 10 {
        x[5] = f32::NAN;
        // a tie for the max in row 0: the first index must win
        x[3] = 100.0;
        x[n - 1] = 100.0;
    }
    let want: Vec<u32> = x
        .chunks(n)
        .map(|r| {
            let mut best: Option<(usize, f32)> = None;
            for (i, &v) in r.iter().enumerate() {
                if !v.is_nan() && best.is_none_or(|(_, b)| v > b) {
                    best = Some((i, v));
                }
            }
            best.map_or(0, |(i, _)| i as u32)
        })
        .collect();
    let xb = ctx
        .upload("logits", &f32_bytes(&x))
        .map_err(|e| e.to_string())?;
    let out = ctx
        .zeroed("argmax", (rows * 4) as u64)
        .map_err(|e| e.to_string())?;
    let mut enc = ctx.encoder();
    kernels::argmax(ctx, &mut enc, &xb, n as u64, rows as u64, &out).map_err(|e| e.to_string())?;
    ctx.submit_wait(enc).map_err(|e| e.to_string())?;
    let got = ctx.read_u32(&out, rows).map_err(|e| e.to_string())?;
    if got == want {
        Ok("exact".into())
    } else {
        Err(format!("argmax {got:?} vs {want:?}"))
    }
}

// ---------------------------------------------------------------------------------------------

type CaseFn = Box<dyn Fn(&GpuContext, &mut Rng) -> Result<String, String>>;

fn cases() -> Vec<(String, bool, CaseFn)> {
    let mut v: Vec<(String, bool, CaseFn)> = Vec::new();
    let mut add = |name: String, split: bool, f: CaseFn| v.push((name, split, f));

    for (t, c) in [(1, 1), (1, 31), (2, 33), (3, 257), (1, 1000), (2, 2560)] {
        add(
            format!("act_quant_int8 {t}×{c}"),
            false,
            Box::new(move |x, r| run_act_quant(x, r, t, c)),
        );
    }
    for layout in [TernaryLayout::Bits2, TernaryLayout::Base3] {
        for st in [FloatType::F32, FloatType::F16, FloatType::Bf16] {
            for (rows, cols, group, tokens) in [
                (1, 1, 0, 1),
                (1, 31, 0, 1),
                (33, 257, 0, 2),
                (257, 33, 0, 1),
                (31, 1000, 0, 3),
                (9, 1000, 40, 2),
                (17, 96, 32, 1),
                (5, 80, 1, 1),
                // the decode kernel's shapes (2-bit: words per row a multiple of 4, groups of
                // whole 64-column chunks): one chunk, a group per chunk, an odd chunk count (its
                // two-per-trip loop's tail), groups across the lanes' stride, several tokens
                (13, 64, 0, 1),
                (9, 192, 64, 2),
                (5, 1088, 0, 3),
                (21, 4096, 256, 1),
                (3, 128, 128, 1),
            ] {
                add(
                    format!(
                        "ternary {layout:?} {st:?} {rows}×{cols} group {group} tokens {tokens}"
                    ),
                    false,
                    Box::new(move |x, r| run_ternary(x, r, layout, st, rows, cols, group, tokens)),
                );
            }
        }
        add(
            format!("ternary {layout:?} f32 300×2560 split"),
            true,
            Box::new(move |x, r| run_ternary(x, r, layout, FloatType::F32, 300, 2560, 0, 2)),
        );
        add(
            format!("ternary {layout:?} f16 600×640 group 64 split"),
            true,
            Box::new(move |x, r| run_ternary(x, r, layout, FloatType::F16, 600, 640, 64, 1)),
        );
    }
    for q in [GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q4_1] {
        // Odd sizes: 37 and 65 blocks per row (the GEMV's two-units-per-step loop and its
        // tail), odd row counts, 3 tokens; 96 and 97 blocks (rows of 3072 and 3104 columns).
        for (rows, cols, tokens) in [(1, 32), (33, 64), (257, 1024), (31, 576)]
            .map(|(r, c)| (r, c, 1))
            .into_iter()
            .chain([
                (7, 96, 3),
                (13, 1184, 1),
                (9, 2080, 3),
                (11, 3072, 2),
                (5, 3104, 3),
            ])
        {
            add(
                format!("ggml {q:?} {rows}×{cols} tokens {tokens}"),
                false,
                Box::new(move |x, r| run_ggml(x, r, q, rows, cols, tokens)),
            );
        }
        add(
            format!("ggml {q:?} 500×1024 split"),
            true,
            Box::new(move |x, r| run_ggml(x, r, q, 500, 1024, 2)),
        );
    }
    let p = |lanes, block_symbols| {
        Some(neuzip::Params {
            lanes,
            block_symbols,
        })
    };
    for (name, dtype, k, rows, cols, params, specials) in [
        ("bf16 lossless 1×1", FloatType::Bf16, 7, 1, 1, None, false),
        ("bf16 lossless 3×33", FloatType::Bf16, 7, 3, 33, None, false),
        (
            "bf16 lossless 64×1000",
            FloatType::Bf16,
            7,
            64,
            1000,
            None,
            true,
        ),
        (
            "bf16 lossless 200×33, 64 lanes, blocks of 33",
            FloatType::Bf16,
            7,
            200,
            33,
            p(64, 40),
            false,
        ),
        (
            "bf16 lossless 2×70000 (blocks split rows)",
            FloatType::Bf16,
            7,
            2,
            70000,
            None,
            false,
        ),
        ("bf16 k=3 40×257", FloatType::Bf16, 3, 40, 257, None, true),
        ("bf16 k=0 16×100", FloatType::Bf16, 0, 16, 100, None, false),
        (
            "f16 lossless 31×257",
            FloatType::F16,
            10,
            31,
            257,
            None,
            true,
        ),
        ("f16 k=1 9×31", FloatType::F16, 1, 9, 31, p(3, 50), false),
        (
            "f32 lossless 33×1000",
            FloatType::F32,
            23,
            33,
            1000,
            p(32, 4096),
            true,
        ),
        ("f32 k=3 5×5", FloatType::F32, 3, 5, 5, p(1, 7), true),
    ] {
        add(
            format!("neuzip {name}"),
            false,
            Box::new(move |x, r| run_neuzip(x, r, dtype, k, rows, cols, params, specials)),
        );
    }
    for (name, dtype, k, rows, cols, params) in [
        ("bf16 lossless 1×1", FloatType::Bf16, 7, 1, 1, None),
        (
            "bf16 lossless 3×33 (odd block starts)",
            FloatType::Bf16,
            7,
            3,
            33,
            None,
        ),
        ("bf16 lossless 64×1000", FloatType::Bf16, 7, 64, 1000, None),
        (
            "bf16 lossless 5×7, 64 lanes",
            FloatType::Bf16,
            7,
            5,
            7,
            p(64, 333),
        ),
        (
            "bf16 lossless 2×9001 (blocks split odd rows)",
            FloatType::Bf16,
            7,
            2,
            9001,
            None,
        ),
        (
            "bf16 lossless 2×20000 (blocks split rows)",
            FloatType::Bf16,
            7,
            2,
            20000,
            None,
        ),
        ("bf16 k=3 40×257", FloatType::Bf16, 3, 40, 257, None),
        ("bf16 k=3 32×512", FloatType::Bf16, 3, 32, 512, None),
        ("f16 lossless 31×257", FloatType::F16, 10, 31, 257, None),
        ("f16 k=1 9×31, 3 lanes", FloatType::F16, 1, 9, 31, p(3, 50)),
        ("f32 lossless 33×1000", FloatType::F32, 23, 33, 1000, None),
        ("f32 k=3 5×5, 1 lane", FloatType::F32, 3, 5, 5, p(1, 7)),
    ] {
        add(
            format!("neuzip v2 {name}"),
            false,
            Box::new(move |x, r| run_neuzip_v2(x, r, dtype, k, rows, cols, params)),
        );
    }
    for dtype in [FloatType::Bf16, FloatType::F32] {
        add(
            format!("neuzip v2 {dtype:?} corrupt stream"),
            false,
            Box::new(move |x, r| run_neuzip_v2_corrupt(x, r, dtype)),
        );
    }
    add(
        "neuzip v2 bf16 400×500 split".into(),
        true,
        Box::new(move |x, r| run_neuzip_v2(x, r, FloatType::Bf16, 7, 400, 500, p(32, 4000))),
    );
    add(
        "neuzip bf16 400×500 split".into(),
        true,
        Box::new(move |x, r| run_neuzip(x, r, FloatType::Bf16, 7, 400, 500, p(32, 4000), false)),
    );
    add(
        "neuzip f32 k=23 100×1000 split".into(),
        true,
        Box::new(move |x, r| run_neuzip(x, r, FloatType::F32, 23, 100, 1000, p(16, 3000), true)),
    );
    for (rows, n) in [(1, 1), (3, 576), (2, 1000), (4, 2560)] {
        add(
            format!("rmsnorm {rows}×{n}"),
            false,
            Box::new(move |x, r| run_rmsnorm(x, r, rows, n)),
        );
    }
    for neox in [false, true] {
        for (h, d, rd) in [(3, 64, 64), (2, 64, 32), (1, 2, 2), (5, 128, 128)] {
            add(
                format!("rope neox={neox} {h}×{d} rope_dim {rd}"),
                false,
                Box::new(move |x, r| run_rope(x, r, h, d, rd, &[0, 1, 7, 4095], neox)),
            );
        }
    }
    for op in [EltOp::SwiGlu, EltOp::Relu2Glu, EltOp::Add] {
        for n in [1, 257, 70000] {
            add(
                format!("{op:?} {n}"),
                false,
                Box::new(move |x, r| run_elementwise(x, r, op, n)),
            );
        }
    }
    for (rows, n) in [(1, 1), (2, 31), (3, 1000), (1, 49152)] {
        add(
            format!("argmax {rows}×{n}"),
            false,
            Box::new(move |x, r| run_argmax(x, r, rows, n)),
        );
    }
    // Kernel families in their own files under `tests/parity/` add their cases here.
    for (name, split, f) in extra_cases() {
        add(name, split, f);
    }
    v
}

/// Cases of the kernel families in `tests/parity/*.rs` (one `extend` line per file).
fn extra_cases() -> Vec<(String, bool, CaseFn)> {
    #[allow(unused_mut)]
    let mut v: Vec<(String, bool, CaseFn)> = Vec::new();
    v.extend(gemm::cases());
    v.extend(fused::cases());
    v.extend(gate_up::cases());
    v.extend(attn::cases());
    v.extend(kv::cases());
    v.extend(minicache::cases());
    v.extend(cce::cases());
    v.extend(float_ops::cases());
    v.extend(sample::cases());
    v.extend(neuzip_gemv::cases());
    v.extend(rope_kv::cases());
    v.extend(ggml_norm::cases());
    v.extend(kquants::cases());
    v.extend(family::cases());
    v
}

/// The cases to run. `TERN_PARITY_FILTER=text` keeps the cases whose name contains it, or one
/// of its `|`-separated parts (local iteration; CI's GL stage). `TERN_PARITY_SAMPLE=N` keeps every N-th case plus the first of each kernel family
/// (its first two words), so a slow backend (CI's GL on llvmpipe) still runs every kernel.
fn select(all: Vec<(String, bool, CaseFn)>) -> Vec<(String, bool, CaseFn)> {
    let filter = std::env::var("TERN_PARITY_FILTER").unwrap_or_default();
    let every: usize = std::env::var("TERN_PARITY_SAMPLE")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1)
        .max(1);
    let mut families = std::collections::HashSet::new();
    // the family: the first two words, or one where the second is a size ("act_quant_int8 1×31")
    let family = |n: &str| {
        let w: Vec<&str> = n.split_whitespace().take(2).collect();
        match w.as_slice() {
            [a, b] if !b.contains('×') => format!("{a} {b}"),
            _ => w.first().copied().unwrap_or("").to_string(),
        }
    };
    all.into_iter()
        .filter(|c| filter.split('|').any(|f| c.0.contains(f)))
        .enumerate()
        .filter(|(i, c)| families.insert(family(&c.0)) | (i % every == 0))
        .map(|(_, c)| c)
        .collect()
}

#[test]
fn parity_table() {
    let Some(ctx) = context(None) else { return };
    let Some(split_ctx) = context(Some(SPLIT_LIMIT)) else {
        return;
    };
    let mut rng = Rng(0x7e57);
    let mut failures = Vec::new();
    let t0 = std::time::Instant::now();
    let all = select(cases());
    for (name, split, f) in &all {
        let c = if *split { &split_ctx } else { &ctx };
        let t = std::time::Instant::now();
        match f(c, &mut rng) {
            Ok(s) => eprintln!("ok   {name}: {s} [{:.2} s]", t.elapsed().as_secs_f64()),
            Err(e) => {
                eprintln!("FAIL {name}: {e}");
                failures.push(format!("{name}: {e}"));
            }
        }
    }
    eprintln!(
        "{} cases in {:.1} s, {} pipelines compiled",
        all.len(),
        t0.elapsed().as_secs_f64(),
        ctx.pipelines_compiled()
    );
    assert!(
        failures.is_empty(),
        "{} parity failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// BitNet a4.8's kernels (`parity/a48.rs`), once with the packed integer dot product and once
/// with the plain byte sum, on the same adapter.
#[test]
fn parity_a48() {
    let mut failures = Vec::new();
    let t0 = std::time::Instant::now();
    let mut all = a48::cases();
    all.extend(decode::cases());
    all.extend(topk_fused::cases());
    let all = select(all);
    for packed in [true, false] {
        let ctx = match GpuContext::with_options(GpuOptions {
            packed_dot: Some(packed),
            ..GpuOptions::default()
        }) {
            Ok(c) => c,
            Err(e) => {
                if tern_tests::gpu_required("gpu_parity") {
                    panic!("TERN_REQUIRE_GPU=1 or CI=true but no usable GPU adapter: {e}");
                }
                eprintln!("skipping GPU parity: {e}");
                return;
            }
        };
        let mut rng = Rng(0xa48);
        for (name, _, f) in &all {
            let t = std::time::Instant::now();
            match f(&ctx, &mut rng) {
                Ok(s) => eprintln!(
                    "ok   [packed {packed}] {name}: {s} [{:.2} s]",
                    t.elapsed().as_secs_f64()
                ),
                Err(e) => {
                    eprintln!("FAIL [packed {packed}] {name}: {e}");
                    failures.push(format!("[packed {packed}] {name}: {e}"));
                }
            }
        }
    }
    eprintln!(
        "{} cases × 2 dot kinds in {:.1} s",
        all.len(),
        t0.elapsed().as_secs_f64()
    );
    assert!(
        failures.is_empty(),
        "{} parity failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// Real data: SmolLM2-135M's tensors from its GGUF. NeuZip of the F32 norms (lossless and bf16)
/// and of 2048 rows of the Q8_0 token embedding as bf16 decode bit-exactly on the GPU; the Q4_1
/// and Q8_0 weights run through the ggml GEMV against the reference.
#[test]
fn parity_real_smollm2() {
    let Some(ctx) = context(None) else { return };
    let g = tern_import::gguf::GgufFile::open(tern_tests::smollm2_gguf()).unwrap();
    let mut rng = Rng(99);
    let mut n_norms = 0;
    for info in g.tensors() {
        if info.name.ends_with("_norm.weight") && n_norms < 6 {
            let bytes = g.tensor_bytes(info).unwrap();
            let v: Vec<f32> = bytes
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect();
            for (dtype, k) in [(FloatType::F32, 23), (FloatType::Bf16, 7)] {
                let blob = neuzip::encode(dtype, k, &to_dtype(dtype, &v), v.len()).unwrap();
                let r = run_neuzip_blob(&ctx, &blob)
                    .unwrap_or_else(|e| panic!("{} {dtype:?}: {e}", info.name));
                eprintln!("ok   neuzip {} {dtype:?}: {r}", info.name);
            }
            n_norms += 1;
        }
    }
    assert!(n_norms > 0);
    let emb = g.tensor("token_embd.weight").unwrap();
    let shape = emb.shape();
    let (rows, cols) = (2048usize, shape[1] as usize);
    let bytes = g.tensor_bytes(emb).unwrap();
    let row_bytes = cols / 32 * 34;
    let part = &bytes[..rows * row_bytes];
    let vals = Encoding::Q8_0
        .decode_f32(&[rows as u64, cols as u64], part)
        .unwrap();
    let blob = neuzip::encode(FloatType::Bf16, 7, &to_dtype(FloatType::Bf16, &vals), cols).unwrap();
    let r = run_neuzip_blob(&ctx, &blob).unwrap();
    eprintln!("ok   neuzip token_embd[..2048] bf16: {r}");
    let r = run_ggml_bytes(&ctx, &mut rng, GgmlType::Q8_0, rows, cols, 2, part).unwrap();
    eprintln!("ok   ggml Q8_0 token_embd[..2048] × 2 tokens: {r}");
    let mut done = 0;
    for info in g.tensors() {
        let q = match info.ggml_type.block_type() {
            Some(tern_format::ggml::BlockType::Q4_1) => GgmlType::Q4_1,
            _ => continue,
        };
        let s = info.shape();
        let b = g.tensor_bytes(info).unwrap();
        let r = run_ggml_bytes(&ctx, &mut rng, q, s[0] as usize, s[1] as usize, 1, b)
            .unwrap_or_else(|e| panic!("{}: {e}", info.name));
        eprintln!("ok   ggml {:?} {} {:?}: {r}", q, info.name, s);
        done += 1;
        if done == 3 {
            break;
        }
    }
    assert!(done > 0);
}

/// Bad input and faults are typed errors and the context stays usable.
#[test]
fn errors_are_typed_and_survivable() {
    assert!(matches!(
        GpuContext::new(tern_gpu::DevicePreference::Cpu),
        Err(GpuError::CpuRequested)
    ));
    let Some(ctx) = context(Some(SPLIT_LIMIT)) else {
        return;
    };
    // Wrong operand shapes.
    let bytes = ternary::pack(
        TernaryLayout::Bits2,
        2,
        16,
        &[0; 32],
        0,
        FloatType::F32,
        &[1.0],
    )
    .unwrap();
    let w = TernaryWeight::upload(&ctx, TernaryLayout::Bits2, 2, 16, 0, FloatType::F32, &bytes)
        .unwrap();
    let x = ctx.zeroed("x", 4 * 20).unwrap();
    let mut enc = ctx.encoder();
    let a = kernels::quantize_act_int8(&ctx, &mut enc, &x, 1, 20).unwrap();
    let y = ctx.zeroed("y", 8).unwrap();
    assert!(matches!(
        kernels::ternary_gemv(&ctx, &mut enc, &w, &a, &y),
        Err(GpuError::Shape { .. })
    ));
    assert!(matches!(
        kernels::quantize_act_int8(&ctx, &mut enc, &x, 2, 20),
        Err(GpuError::Shape { .. })
    ));
    // Ternary bytes of the wrong length.
    assert!(matches!(
        TernaryWeight::upload(
            &ctx,
            TernaryLayout::Bits2,
            2,
            16,
            0,
            FloatType::F32,
            &bytes[1..]
        ),
        Err(GpuError::Format(_))
    ));
    // A row larger than a binding cannot be split.
    let big = vec![0u8; 34 * 4096];
    assert!(matches!(
        GgmlWeight::upload(&ctx, GgmlType::Q8_0, 1, 4096 * 32, &big),
        Err(GpuError::TooLarge { .. })
    ));
    // Activations larger than one binding.
    let xl = ctx.zeroed("x", 4 * 20000).unwrap();
    assert!(matches!(
        kernels::quantize_act_int8(&ctx, &mut enc, &xl, 1, 20000),
        Err(GpuError::TooLarge { .. })
    ));
    // A buffer larger than the device allows.
    assert!(matches!(
        ctx.zeroed("huge", u64::MAX / 2),
        Err(GpuError::TooLarge { .. })
    ));
    ctx.submit_wait(enc).unwrap();
    // A corrupt NeuZip word stream: structure valid, words flipped → the GPU lanes report it.
    let v: Vec<f32> = (0..4096)
        .map(|i| ((i * 37 % 101) as f32 - 50.0) * 0.01)
        .collect();
    let mut blob = neuzip::encode(FloatType::Bf16, 7, &to_dtype(FloatType::Bf16, &v), 64).unwrap();
    let plan = neuzip::Plan::parse(&blob).unwrap();
    assert!(plan.n_words > 4);
    let w0 = plan.words.offset as usize;
    for b in &mut blob[w0..w0 + 8] {
        *b ^= 0x5a;
    }
    assert!(neuzip::decode(&blob).is_err());
    let t = NeuzipTensor::upload(&ctx, &blob).unwrap();
    assert!(matches!(
        t.decode_to_host(&ctx),
        Err(GpuError::Corrupt { .. })
    ));
    // The same stream kept compressed and decoded just in time, chunk by chunk into one small
    // scratch: the sticky status is read after the decodes → Corrupt; an intact stream → Ok.
    let jit_status = |blob: &[u8]| -> Result<usize, GpuError> {
        let t = NeuzipTensor::upload_compressed(&ctx, blob, 1024)?;
        let scratch = ctx.zeroed("jit scratch", t.max_chunk_output_bytes())?;
        let mut enc = ctx.encoder();
        t.clear_status(&mut enc);
        for c in 0..t.chunks() {
            t.decode_chunk_into(&ctx, &mut enc, c, &scratch)?;
        }
        ctx.submit_wait(enc)?;
        t.check_status(&ctx).map(|()| t.chunks())
    };
    assert!(matches!(jit_status(&blob), Err(GpuError::Corrupt { .. })));
    let params = neuzip::Params {
        lanes: 8,
        block_symbols: 256,
    };
    let good = neuzip::encode_with(
        FloatType::Bf16,
        7,
        &to_dtype(FloatType::Bf16, &v),
        64,
        params,
    )
    .unwrap();
    let blocks = neuzip::Plan::parse(&good).unwrap().n_blocks;
    let chunks = jit_status(&good).unwrap();
    assert!(
        chunks > 1 || blocks == 1,
        "{chunks} chunks of {blocks} blocks"
    );
    // Malformed header → the format's typed error.
    assert!(matches!(
        NeuzipTensor::upload(&ctx, &blob[..40]),
        Err(GpuError::Format(_))
    ));
    // Still usable afterwards.
    run_elementwise(&ctx, &mut Rng(1), EltOp::Add, 100).unwrap();
}
