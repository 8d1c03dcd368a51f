//! Parity of the attention block's fusions over the concatenated q/k/v projection
//! (`kernels/rope_kv.rs`): `rope_kv_store` (RoPE of q and k fused with the f32 / f16 KV store)
//! against the separate kernels it replaces (`rope` on planar q and k, then `kv_store` of keys
//! and values) **bit for bit** — the rotated queries and every cache word — and against the CPU
//! references (`tern_reference::rope`, `kv_codec::f16_sat`), and `qkv_split` (exact copies).
//! Shapes: SmolLM2's GQA (9 query heads over 3 kv heads × 64), 2B4T's (20 over 5 × 128), an odd
//! head (4 over 2 × 18, RoPE on 10 of the 18 dims), the smallest (1 × 2); one token and a batch
//! of 3; a batch crossing the end of the context (positions past n_ctx are not written).

use super::attn::step_buffer;
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
    v
}
