//! Parity of the attention block's fusions over the concatenated q/k/v projection
//! (`kernels/rope_kv.rs`): `rope_kv_store` (RoPE of q and k fused with the f32 / f16 KV store)
//! against the separate kernels it replaces (`rope` on planar q and k, then `kv_store` of keys
//! and values) **bit for bit** — the rotated queries and every cache word — and against the CPU
//! references (`tern_reference::rope`, `kv_codec::f16_sat`), and `qkv_split` (exact copies).
//! Shapes: SmolLM2's GQA (9 query heads over 3 kv heads × 64), 2B4T's (20 over 5 × 128), an odd
//! head (4 over 2 × 18, RoPE on 10 of the 18 dims), the smallest (1 × 2); one token and a batch
//! of 3; a batch crossing the end of the context (positions past n_ctx are not written).
//!
//! The quantized caches (issue 14: q8, KIVI q4/q3/q2, absmax a4/a3): `rope_kv_store` over a
//! cache whose first `p0` positions the separate `kv_store` filled (in chunks, so KIVI reads its
//! ring from earlier submissions), against the separate kernels bit for bit (every code, scale,
//! zero point, window row), and every word against the CPU oracle `tern_reference::kv_codec`
//! (`parity/kv.rs`'s `oracle`) over the keys as the separate rope rotated them. KIVI at decode
//! on its block edges (p0 = R − 1: a key group and the value rows leave the window in the fused
//! dispatch; R; R + 1) and with G = 16 (10 codes per word straddling groups); a3's position 0;
//! batches of 3 for the whole-row formats, one ending past the context. The rotated formats (q4r,
//! q3r, q2r: `rope_kv.wgsl` PASS 2, each key and value head rotated then quantized by a
//! workgroup) likewise, against the separate kernels and the oracle (which rotates each head as
//! the CPU store does), head_dim 64, 128 and 16, one token and odd batches.

use super::attn::step_buffer;
use super::kv::{bits_of, compare, oracle};
use super::*;
use tern_format::{Kivi, KvQuant};
use tern_gpu::kernels::{KvLayout, QkvShape};
use tern_reference::kv_codec as cc;

fn e(x: impl std::fmt::Display) -> String {
    x.to_string()
}

#[allow(clippy::too_many_arguments)]
fn run_rope_kv(
    ctx: &GpuContext,
    rng: &mut Rng,
    quant: KvQuant,
    (nh, nkv, hd, rd): (usize, usize, usize, usize),
    neox: bool,
    p0: usize,
    n: usize,
    n_ctx: usize,
) -> Result<String, String> {
    let (q_dim, kv) = (nh * hd, nkv * hd);
    let stride = q_dim + 2 * kv;
    let qkv: Vec<f32> = (0..n * stride).map(|_| rng.normal()).collect();
    let rows = |off: usize, w: usize| -> Vec<f32> {
        (0..n)
            .flat_map(|t| qkv[t * stride + off..t * stride + off + w].to_vec())
            .collect()
    };
    let (q, k, v) = (rows(0, q_dim), rows(q_dim, kv), rows(q_dim + kv, kv));
    let positions: Vec<u64> = (p0..p0 + n).map(|p| p as u64).collect();
    let layout =
        KvLayout::new(quant, Kivi::default(), nkv as u64, hd as u64, n_ctx as u64).map_err(e)?;
    let table = kernels::rope_table(&positions, rd as u64, 10000.0);
    let table_b = ctx.upload("rope table", &table).map_err(e)?;
    let step = step_buffer(ctx, p0 as u32, n as u32);
    let caches = || -> Result<(wgpu::Buffer, wgpu::Buffer), String> {
        Ok((
            ctx.zeroed("k", layout.buffer_bytes(true)).map_err(e)?,
            ctx.zeroed("v", layout.buffer_bytes(false)).map_err(e)?,
        ))
    };
    // fused
    let qkv_b = ctx.upload("qkv", &f32_bytes(&qkv)).map_err(e)?;
    let (kf, vf) = caches()?;
    let shape = QkvShape {
        n_head: nh as u64,
        rope_dim: rd as u64,
        neox,
    };
    let mut enc = ctx.encoder();
    kernels::rope_kv_store(
        ctx,
        &mut enc,
        &layout,
        shape,
        &step,
        &qkv_b,
        &table_b,
        (&kf, &vf),
        n as u64,
    )
    .map_err(e)?;
    ctx.submit_wait(enc).map_err(e)?;
    // separate kernels, from the split projection
    let (qs, ks, vs) = (
        ctx.zeroed("q", (n * q_dim * 4) as u64).map_err(e)?,
        ctx.zeroed("k rows", (n * kv * 4) as u64).map_err(e)?,
        ctx.zeroed("v rows", (n * kv * 4) as u64).map_err(e)?,
    );
    let src = ctx.upload("qkv", &f32_bytes(&qkv)).map_err(e)?;
    let (ksep, vsep) = caches()?;
    let mut enc = ctx.encoder();
    let (nt, hd_, rd_) = (n as u64, hd as u64, rd as u64);
    kernels::qkv_split(
        ctx,
        &mut enc,
        &src,
        (q_dim as u64, kv as u64),
        (&qs, &ks, &vs),
        nt,
    )
    .map_err(e)?;
    kernels::rope_with_table(ctx, &mut enc, &qs, &table_b, nh as u64, hd_, rd_, nt, neox)
        .map_err(e)?;
    kernels::rope_with_table(ctx, &mut enc, &ks, &table_b, nkv as u64, hd_, rd_, nt, neox)
        .map_err(e)?;
    kernels::kv_store(ctx, &mut enc, &layout, &step, &ks, &ksep, nt, true).map_err(e)?;
    kernels::kv_store(ctx, &mut enc, &layout, &step, &vs, &vsep, nt, false).map_err(e)?;
    ctx.submit_wait(enc).map_err(e)?;
    let bits = |b: &wgpu::Buffer| -> Result<Vec<u32>, String> {
        let f = ctx.read_f32(b, (b.size() / 4) as usize).map_err(e)?;
        Ok(f.into_iter().map(f32::to_bits).collect())
    };
    // qkv_split is a copy
    if ctx.read_f32(&vs, n * kv).map_err(e)? != v {
        return Err("qkv_split: values are not the projection's".into());
    }
    // rotated queries: the separate kernel's bits, and the reference's
    let got = ctx.read_f32(&qkv_b, n * stride).map_err(e)?;
    let got_q = (0..n)
        .flat_map(|t| got[t * stride..t * stride + q_dim].to_vec())
        .collect::<Vec<f32>>();
    let sep_q = ctx.read_f32(&qs, n * q_dim).map_err(e)?;
    if got_q
        .iter()
        .map(|x| x.to_bits())
        .ne(sep_q.iter().map(|x| x.to_bits()))
    {
        return Err("rotated queries differ from the separate rope kernel's".into());
    }
    let kv_rows = |x: &[f32]| -> Vec<f32> {
        (0..n)
            .flat_map(|t| x[t * stride + q_dim..(t + 1) * stride].to_vec())
            .collect()
    };
    if kv_rows(&got) != kv_rows(&qkv) {
        return Err("the key / value rows of qkv were written".into());
    }
    let (mut want_q, mut want_k) = (q.clone(), k.clone());
    for (t, &pos) in positions.iter().enumerate() {
        tern_reference::rope(
            &mut want_q[t * q_dim..(t + 1) * q_dim],
            nh,
            hd,
            rd,
            pos as usize,
            10000.0,
            neox,
        )
        .map_err(e)?;
        tern_reference::rope(
            &mut want_k[t * kv..(t + 1) * kv],
            nkv,
            hd,
            rd,
            pos as usize,
            10000.0,
            neox,
        )
        .map_err(e)?;
    }
    score("rope_kv q", Check::Nmse(1e-12), &got_q, &want_q)?;
    // caches: the separate kernels' words exactly; the reference's values
    for (what, fused, sep, rows_) in [("keys", &kf, &ksep, &want_k), ("values", &vf, &vsep, &v)] {
        let (a, b) = (bits(fused)?, bits(sep)?);
        if let Some(i) = a.iter().zip(&b).position(|(x, y)| x != y) {
            return Err(format!(
                "{what}: word {i} {:#x}, the separate kernels' {:#x}",
                a[i], b[i]
            ));
        }
        let stored = n.min(n_ctx.saturating_sub(p0));
        let mut vals = Vec::new();
        let mut want = Vec::new();
        for t in 0..stored {
            let pos = p0 + t;
            for c in 0..kv {
                let x = rows_[t * kv + c];
                match quant {
                    KvQuant::F16 => {
                        let w = a[(pos * kv + c) / 2];
                        let h = (w >> (16 * ((pos * kv + c) % 2))) & 0xffff;
                        vals.push(f32::from(half::f16::from_bits(h as u16)));
                        want.push(cc::f16_sat(x).to_f32());
                    }
                    _ => {
                        vals.push(f32::from_bits(a[pos * kv + c]));
                        want.push(x);
                    }
                }
            }
        }
        score(what, Check::Nmse(1e-12), &vals, &want)?;
        // nothing past the context
        let row_words = layout.wpr() as usize;
        if a[(n_ctx * row_words).min(a.len())..]
            .iter()
            .any(|&w| w != 0)
        {
            return Err(format!("{what}: words past the context written"));
        }
    }
    Ok(format!(
        "{} words of each cache equal",
        layout.buffer_bytes(true) / 4
    ))
}

/// A quantized cache: `rope_kv_store` of `n` tokens at `p0` over `p0` positions stored first by
/// `kv_store` (batches of `chunk`), against the separate kernels and the CPU oracle.
#[allow(clippy::too_many_arguments)]
fn run_rope_kv_quant(
    ctx: &GpuContext,
    rng: &mut Rng,
    quant: KvQuant,
    kivi: Kivi,
    (nh, nkv, hd, rd): (usize, usize, usize, usize),
    neox: bool,
    (p0, n, n_ctx, chunk): (usize, usize, usize, usize),
) -> Result<String, String> {
    let (q_dim, kv) = (nh * hd, nkv * hd);
    let stride = q_dim + 2 * kv;
    let layout = KvLayout::new(quant, kivi, nkv as u64, hd as u64, n_ctx as u64).map_err(e)?;
    // the prefix's rows (keys as stored, i.e. already rotated), an outlier channel now and then
    let pre: Vec<f32> = (0..2 * p0 * kv)
        .map(|i| rng.normal() * if i % 37 == 5 { 8.0 } else { 1.0 })
        .collect();
    let (k_pre, v_pre) = pre.split_at(p0 * kv);
    let qkv: Vec<f32> = (0..n * stride)
        .map(|i| rng.normal() * if i % 41 == 7 { 6.0 } else { 1.0 })
        .collect();
    let positions: Vec<u64> = (p0..p0 + n).map(|p| p as u64).collect();
    let table = kernels::rope_table(&positions, rd as u64, 10000.0);
    let table_b = ctx.upload("rope table", &table).map_err(e)?;
    let step = step_buffer(ctx, p0 as u32, n as u32);
    let prefilled = || -> Result<(wgpu::Buffer, wgpu::Buffer), String> {
        let (kb, vb) = (
            ctx.zeroed("k", layout.buffer_bytes(true)).map_err(e)?,
            ctx.zeroed("v", layout.buffer_bytes(false)).map_err(e)?,
        );
        let mut at = 0;
        while at < p0 {
            let len = chunk.min(p0 - at);
            let rows = |x: &[f32]| f32_bytes(&x[at * kv..(at + len) * kv]);
            let ks = ctx.upload("k rows", &rows(k_pre)).map_err(e)?;
            let vs = ctx.upload("v rows", &rows(v_pre)).map_err(e)?;
            let st = step_buffer(ctx, at as u32, len as u32);
            let mut enc = ctx.encoder();
            let nn = len as u64;
            kernels::kv_store(ctx, &mut enc, &layout, &st, &ks, &kb, nn, true).map_err(e)?;
            kernels::kv_store(ctx, &mut enc, &layout, &st, &vs, &vb, nn, false).map_err(e)?;
            ctx.submit_wait(enc).map_err(e)?;
            at += len;
        }
        Ok((kb, vb))
    };
    // fused
    let qkv_b = ctx.upload("qkv", &f32_bytes(&qkv)).map_err(e)?;
    let (kf, vf) = prefilled()?;
    let shape = QkvShape {
        n_head: nh as u64,
        rope_dim: rd as u64,
        neox,
    };
    let (nt, hd_, rd_) = (n as u64, hd as u64, rd as u64);
    let mut enc = ctx.encoder();
    let caches = (&kf, &vf);
    kernels::rope_kv_store(
        ctx, &mut enc, &layout, shape, &step, &qkv_b, &table_b, caches, nt,
    )
    .map_err(e)?;
    ctx.submit_wait(enc).map_err(e)?;
    // separate kernels
    let (qs, ks, vs) = (
        ctx.zeroed("q", (n * q_dim * 4) as u64).map_err(e)?,
        ctx.zeroed("k rows", (n * kv * 4) as u64).map_err(e)?,
        ctx.zeroed("v rows", (n * kv * 4) as u64).map_err(e)?,
    );
    let src = ctx.upload("qkv", &f32_bytes(&qkv)).map_err(e)?;
    let (ksep, vsep) = prefilled()?;
    let mut enc = ctx.encoder();
    let dims = (q_dim as u64, kv as u64);
    kernels::qkv_split(ctx, &mut enc, &src, dims, (&qs, &ks, &vs), nt).map_err(e)?;
    kernels::rope_with_table(ctx, &mut enc, &qs, &table_b, nh as u64, hd_, rd_, nt, neox)
        .map_err(e)?;
    kernels::rope_with_table(ctx, &mut enc, &ks, &table_b, nkv as u64, hd_, rd_, nt, neox)
        .map_err(e)?;
    kernels::kv_store(ctx, &mut enc, &layout, &step, &ks, &ksep, nt, true).map_err(e)?;
    kernels::kv_store(ctx, &mut enc, &layout, &step, &vs, &vsep, nt, false).map_err(e)?;
    ctx.submit_wait(enc).map_err(e)?;
    // rotated queries: the separate kernel's bits
    let got = ctx.read_f32(&qkv_b, n * stride).map_err(e)?;
    let sep_q = ctx.read_f32(&qs, n * q_dim).map_err(e)?;
    let got_q = (0..n).flat_map(|t| got[t * stride..t * stride + q_dim].to_vec());
    if got_q
        .map(f32::to_bits)
        .ne(sep_q.iter().map(|x| x.to_bits()))
    {
        return Err("rotated queries differ from the separate rope kernel's".into());
    }
    // every word of both caches: the separate kernels' bits
    for (what, fused, sep) in [("keys", &kf, &ksep), ("values", &vf, &vsep)] {
        let (a, b) = (bits_of(ctx, fused)?, bits_of(ctx, sep)?);
        if let Some(i) = a.iter().zip(&b).position(|(x, y)| x != y) {
            return Err(format!(
                "{what}: word {i} {:#x}, the separate kernels' {:#x}",
                a[i], b[i]
            ));
        }
    }
    // and the CPU oracle's, over the keys as rotated by the separate rope (positions < n_ctx)
    let stored = n.min(n_ctx - p0);
    let mut k_all = k_pre.to_vec();
    k_all.extend(
        ctx.read_f32(&ks, n * kv)
            .map_err(e)?
            .into_iter()
            .take(stored * kv),
    );
    let mut v_all = v_pre.to_vec();
    v_all.extend((0..stored).flat_map(|t| qkv[t * stride + q_dim + kv..(t + 1) * stride].to_vec()));
    let or = oracle(&layout, &k_all, &v_all, p0 + stored)?;
    let ck = compare("keys vs oracle", &bits_of(ctx, &kf)?, &or.k_want)?;
    let cv = compare("values vs oracle", &bits_of(ctx, &vf)?, &or.v_want)?;
    Ok(format!(
        "{} words of each cache equal the separate kernels'; {ck}+{cv} the oracle's",
        layout.buffer_bytes(true) / 4
    ))
}

pub fn cases() -> Vec<(String, bool, CaseFn)> {
    let mut v: Vec<(String, bool, CaseFn)> = Vec::new();
    for quant in [KvQuant::F32, KvQuant::F16] {
        for neox in [false, true] {
            for (shape, p0, n, n_ctx) in [
                ((9, 3, 64, 64), 0, 1, 8),
                ((9, 3, 64, 64), 37, 3, 64),
                ((20, 5, 128, 128), 4095, 1, 4096),
                ((4, 2, 18, 10), 5, 3, 7),
                ((1, 1, 2, 2), 2, 1, 3),
            ] {
                v.push((
                    format!(
                        "rope_kv {} neox={neox} {shape:?} p0={p0} n={n} ctx={n_ctx}",
                        quant.name()
                    ),
                    false,
                    Box::new(move |c, r| run_rope_kv(c, r, quant, shape, neox, p0, n, n_ctx)),
                ));
            }
        }
    }
    // quantized caches: (shape, neox, (p0, n, n_ctx, prefix chunk))
    let dflt = Kivi::default();
    let g16 = Kivi {
        group: 16,
        residual: 32,
    };
    type Q = (
        (usize, usize, usize, usize),
        bool,
        (usize, usize, usize, usize),
    );
    let whole: [Q; 4] = [
        ((9, 3, 64, 64), false, (0, 1, 8, 1)),
        ((20, 5, 128, 128), true, (300, 1, 512, 128)),
        ((9, 3, 64, 64), true, (37, 3, 64, 20)),
        ((4, 2, 18, 10), false, (5, 3, 7, 2)),
    ];
    let kivi: [(Kivi, Q); 5] = [
        (dflt, ((9, 3, 64, 64), true, (0, 1, 8, 1))),
        (dflt, ((20, 5, 128, 128), true, (127, 1, 200, 50))),
        (dflt, ((9, 3, 64, 64), false, (128, 1, 140, 64))),
        (dflt, ((20, 5, 128, 128), false, (129, 1, 300, 129))),
        (g16, ((4, 2, 18, 10), true, (31, 1, 40, 7))),
    ];
    // the rotated formats: SmolLM2's and 2B4T's heads, one token and odd batches (one past the
    // context's end), 16-dim heads (q3r's two-head units, a one-head unit last)
    let rot: [Q; 6] = [
        ((9, 3, 64, 64), false, (0, 1, 8, 1)),
        ((20, 5, 128, 128), true, (300, 1, 512, 128)),
        ((9, 3, 64, 64), true, (37, 3, 64, 20)),
        ((20, 5, 128, 128), false, (7, 5, 10, 3)),
        ((6, 3, 16, 16), true, (5, 3, 9, 2)),
        ((9, 3, 64, 32), false, (11, 1, 12, 4)),
    ];
    for quant in KvQuant::ALL.into_iter().filter(|q| q.bits() < 16) {
        let list: Vec<(Kivi, Q)> = if quant.is_kivi() {
            kivi.to_vec()
        } else if quant.is_rotated() {
            rot.iter().map(|&c| (dflt, c)).collect()
        } else {
            whole.iter().map(|&c| (dflt, c)).collect()
        };
        for (kv_, (shape, neox, at)) in list {
            v.push((
                format!(
                    "rope_kv {} G={} R={} neox={neox} {shape:?} (p0, n, ctx, chunk)={at:?}",
                    quant.name(),
                    kv_.group,
                    kv_.residual
                ),
                false,
                Box::new(move |c, r| run_rope_kv_quant(c, r, quant, kv_, shape, neox, at)),
            ));
        }
    }
    v
}
