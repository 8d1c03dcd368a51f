//! Parity of MiniCache on the GPU (`minicache.rs`): a pair of layers' keys and values merged
//! (`minicache_merge.wgsl`), the directions stored in the cache's format, and both layers'
//! attention (`attention.wgsl` with MC = 1 and 2) against the CPU oracle
//! (`tern_reference::kv_merge::slerp_merge` with the design's retention rule, `kv_codec`):
//!
//! * merge: directions within NMSE 1e-10 of `slerp_merge`'s (the kernel's acos/sin are Cephes'
//!   polynomials, ~1 ulp; WGSL's built-ins differed by ~1e-5 on lavapipe; the retention decision
//!   compares the dot product with cos(γπ), so it agrees with the CPU's but within an ulp of the
//!   threshold), the
//!   magnitudes within one f16 step, retention decisions, pool slots, positions and retained
//!   rows (f16) exactly;
//! * store: the stored directions read back and dequantized by `kv_codec` (the store itself is
//!   `kv.rs`'s parity, bit for bit);
//! * attention of layer a (its batch's own rows unmerged) and layer b (retained rows from the
//!   pool) against `tern_reference::attention` over the oracle's rows: NMSE ≤ 1e-6.
//!
//! A prefix is merged in batches first (slots continue across batches); γ is chosen so that
//! about a third of the (token, head) pairs are retained, and a small pool fills up (the rest
//! are merged).

use super::attn::{reference, step_buffer};
use super::*;
use half::f16;
use tern_format::{Kivi, KvQuant};
use tern_gpu::kernels::{self, minicache, KvLayout, KvRead};
use tern_reference::kv_codec as cc;
use tern_reference::kv_merge::slerp_merge;

fn words(ctx: &GpuContext, b: &wgpu::Buffer, at: u64, n: u64) -> Result<Vec<u32>, String> {
    let bytes = ctx
        .read_bytes(b, at * 4, n * 4)
        .map_err(|e| e.to_string())?;
    Ok(bytes
        .chunks_exact(4)
        .map(|w| u32::from_le_bytes([w[0], w[1], w[2], w[3]]))
        .collect())
}

fn half(w: &[u32], e: usize) -> u16 {
    (w.get(e / 2).copied().unwrap_or(0) >> (16 * (e % 2))) as u16
}

/// Dequantized rows of the direction stream (positions `0..n`) from the GPU buffer's codes.
fn dequant_dirs(l: &KvLayout, buf: &[u32], n: usize, key: bool) -> Result<Vec<f32>, String> {
    let row = l.row() as usize;
    let (hd, heads) = (l.head_dim as usize, l.heads as usize);
    let par = l.param_word() as usize;
    let mut out = vec![0.0f32; n * row];
    let e = |e: tern_reference::ReferenceError| e.to_string();
    for p in 0..n {
        let o = &mut out[p * row..(p + 1) * row];
        let base = l.code_word(p as u64) as usize;
        match l.quant {
            KvQuant::F32 => {
                for (c, x) in o.iter_mut().enumerate() {
                    *x = f32::from_bits(buf[p * row + c]);
                }
            }
            KvQuant::F16 => {
                for (c, x) in o.iter_mut().enumerate() {
                    *x = f16::from_bits(half(buf, p * row + c)).to_f32();
                }
            }
            KvQuant::Q8 | KvQuant::Absmax4 | KvQuant::Absmax3 => {
                let qf = cc::absmax_format_at(l.quant, p);
                let w = cc::words_per_row(qf.bits(), row);
                let s: Vec<f16> = (0..heads)
                    .map(|h| f16::from_bits(half(buf, 2 * par + p * heads + h)))
                    .collect();
                cc::absmax_dequantize_row(qf, &buf[base..base + w], &s, hd, o).map_err(e)?;
            }
            q => {
                let (g, r) = (l.kivi.group as usize, l.kivi.residual as usize);
                let w = l.wpr() as usize;
                if p >= r * (n / r) {
                    let win = 2 * l.window_word(key) as usize;
                    for (c, x) in o.iter_mut().enumerate() {
                        *x = f16::from_bits(half(buf, win + (p % r) * row + c)).to_f32();
                    }
                    continue;
                }
                let sm = |i: usize| {
                    let v = buf[par + i];
                    (f16::from_bits(v as u16), f16::from_bits((v >> 16) as u16))
                };
                if key {
                    let (s, m): (Vec<_>, Vec<_>) = (0..row).map(|c| sm((p / g) * row + c)).unzip();
                    cc::kivi_dequantize_key(q, &buf[base..base + w], &s, &m, o).map_err(e)?;
                } else {
                    let ng = row.div_ceil(g);
                    let (s, m): (Vec<_>, Vec<_>) = (0..ng).map(|i| sm(p * ng + i)).unzip();
                    cc::kivi_dequantize_values(q, g, &buf[base..base + w], &s, &m, o).map_err(e)?;
                }
            }
        }
    }
    Ok(out)
}

#[allow(clippy::too_many_arguments)]
fn run(
    ctx: &GpuContext,
    rng: &mut Rng,
    q: KvQuant,
    (n_head, n_kv, hd): (usize, usize, usize),
    p0: usize,
    n: usize,
    chunk: usize,
    gamma: f32,
) -> Result<String, String> {
    let t = 0.5f32;
    let total = p0 + n;
    let n_ctx = total + 3;
    let (row, q_dim) = (n_kv * hd, n_head * hd);
    let e = |e: GpuError| e.to_string();
    let kivi = Kivi {
        group: 16,
        residual: 32,
    };
    let l = KvLayout::new(q, kivi, n_kv as u64, hd as u64, n_ctx as u64)
        .and_then(KvLayout::pair)
        .map_err(e)?;
    // layer b = layer a rotated a little, plus noise: the angles spread around γ
    let xa: Vec<f32> = (0..2 * total * row).map(|_| rng.normal()).collect();
    let xb: Vec<f32> = xa.iter().map(|&a| a * 0.8 + rng.normal() * 0.9).collect();
    let kb = ctx.zeroed("pair k", l.buffer_bytes(true)).map_err(e)?;
    let vb = ctx.zeroed("pair v", l.buffer_bytes(false)).map_err(e)?;
    let bytes = (n.max(chunk) * row * 4) as u64;
    let dir_k = ctx.zeroed("dir k", bytes).map_err(e)?;
    let dir_v = ctx.zeroed("dir v", bytes).map_err(e)?;
    let up = |v: &[f32], s: usize, len: usize| {
        ctx.upload("rows", &f32_bytes(&v[s * row..(s + len) * row]))
    };
    // (keys of a, b; values of a, b) are [0, total) and [total, 2·total) of xa / xb
    let store = |start: usize, len: usize| -> Result<(), String> {
        let (ka, kb_) = (
            up(&xa, start, len).map_err(e)?,
            up(&xb, start, len).map_err(e)?,
        );
        let (va, vb_) = (
            up(&xa, total + start, len).map_err(e)?,
            up(&xb, total + start, len).map_err(e)?,
        );
        let step = step_buffer(ctx, start as u32, len as u32);
        let mut enc = ctx.encoder();
        let nn = len as u64;
        let tg = (t, gamma);
        minicache::merge(
            ctx,
            &mut enc,
            &l,
            &step,
            tg,
            (&ka, 0),
            &kb_,
            &dir_k,
            &kb,
            nn,
            true,
        )
        .map_err(e)?;
        minicache::merge(
            ctx,
            &mut enc,
            &l,
            &step,
            tg,
            (&va, 0),
            &vb_,
            &dir_v,
            &vb,
            nn,
            false,
        )
        .map_err(e)?;
        kernels::kv_store(ctx, &mut enc, &l, &step, &dir_k, &kb, nn, true).map_err(e)?;
        kernels::kv_store(ctx, &mut enc, &l, &step, &dir_v, &vb, nn, false).map_err(e)?;
        ctx.submit_wait(enc).map_err(e)
    };
    let mut at = 0;
    while at < p0 {
        let len = chunk.min(p0 - at);
        store(at, len)?;
        at += len;
    }
    // the last batch: layer a attends first (its rows unmerged), then the pair is merged
    let qv: Vec<f32> = (0..n * q_dim).map(|_| rng.normal()).collect();
    let qb = ctx.upload("q", &f32_bytes(&qv)).map_err(e)?;
    let (oa, ob) = (
        ctx.zeroed("out a", (n * q_dim * 4) as u64).map_err(e)?,
        ctx.zeroed("out b", (n * q_dim * 4) as u64).map_err(e)?,
    );
    // layer a's queries, then its unmerged keys and values of this batch
    let mut qkv = qv.clone();
    qkv.extend_from_slice(&xa[p0 * row..total * row]);
    qkv.extend_from_slice(&xa[(total + p0) * row..2 * total * row]);
    let qkvb = ctx.upload("qkv", &f32_bytes(&qkv)).map_err(e)?;
    let step = step_buffer(ctx, p0 as u32, n as u32);
    let scale = 1.0 / (hd as f32).sqrt();
    let (nn, nh) = (n as u64, n_head as u64);
    let mut enc = ctx.encoder();
    let first = KvRead::First {
        pend: (n * q_dim) as u64,
    };
    kernels::attention_role(
        ctx,
        &mut enc,
        &l,
        &step,
        &qkvb,
        (&kb, &vb),
        &oa,
        nn,
        nh,
        scale,
        None,
        first,
    )
    .map_err(e)?;
    ctx.submit_wait(enc).map_err(e)?;
    // the oracle of layer a's attention needs the store before this batch
    let k_buf0 = words(ctx, &kb, 0, l.buffer_bytes(true) / 4)?;
    let v_buf0 = words(ctx, &vb, 0, l.buffer_bytes(false) / 4)?;
    store(p0, n)?;
    let mut enc = ctx.encoder();
    kernels::attention_role(
        ctx,
        &mut enc,
        &l,
        &step,
        &qb,
        (&kb, &vb),
        &ob,
        nn,
        nh,
        scale,
        Some(3),
        KvRead::Second,
    )
    .map_err(e)?;
    ctx.submit_wait(enc).map_err(e)?;
    // ---- the oracle
    let [mag, pool, pos, count] = l.pair_sections().map(|x| x as usize);
    let cap = l.pool_cap(n_ctx as u64) as usize;
    let mut report = Vec::new();
    let mut rows = Vec::new(); // (a, b) rows as read, keys then values
    for (key, buf, buf0, dir) in [(true, &kb, &k_buf0, &dir_k), (false, &vb, &v_buf0, &dir_v)] {
        let w = words(ctx, buf, 0, l.buffer_bytes(key) / 4)?;
        let off = if key { 0 } else { total };
        let mut slot = 0usize;
        let mut retained = 0;
        let mut worst_mag = 0.0f32;
        let mut want_dir = vec![0.0f32; n * row];
        for p in 0..total {
            for h in 0..n_kv {
                let o = (off + p) * row + h * hd;
                let m = slerp_merge(&xa[o..o + hd], &xb[o..o + hd], t);
                let retain = m.distance > gamma && slot < cap;
                let (m0, m1) = (
                    half(&w, 2 * mag + p * 2 * n_kv + h),
                    half(&w, 2 * mag + p * 2 * n_kv + n_kv + h),
                );
                let d0 = (f16::from_bits(m0).to_f32() - cc::f16_round(m.norm_a)).abs();
                worst_mag = worst_mag.max(d0 / cc::f16_round(m.norm_a).max(1e-6));
                if retain != (m1 & 0x8000 != 0) {
                    return Err(format!(
                        "{} p={p} h={h}: retention differs (d = {}, γ = {gamma})",
                        if key { "keys" } else { "values" },
                        m.distance
                    ));
                }
                let dir_row: Vec<f32> = if retain {
                    if usize::from(m1 & 0x7fff) != slot || w[pos + slot] != p as u32 {
                        return Err(format!("p={p} h={h}: slot {} vs {slot}", m1 & 0x7fff));
                    }
                    for k in 0..hd {
                        let want = cc::f16_sat(xb[o + k]).to_bits();
                        if half(&w, 2 * pool + slot * hd + k) != want {
                            return Err(format!("p={p} h={h}: retained row differs at {k}"));
                        }
                    }
                    slot += 1;
                    retained += 1;
                    tern_reference::kv_merge::unit(&xa[o..o + hd], m.norm_a).collect()
                } else {
                    let d1 = (f16::from_bits(m1).to_f32() - cc::f16_round(m.norm_b)).abs();
                    worst_mag = worst_mag.max(d1 / cc::f16_round(m.norm_b).max(1e-6));
                    m.dir
                };
                if p >= p0 {
                    want_dir[(p - p0) * row + h * hd..(p - p0) * row + (h + 1) * hd]
                        .copy_from_slice(&dir_row);
                }
            }
        }
        if w[count] as usize != slot {
            return Err(format!("pool count {} vs {slot}", w[count]));
        }
        if worst_mag > 1e-3 {
            return Err(format!("magnitudes off by {worst_mag} (relative)"));
        }
        let got_dir = ctx.read_f32(dir, n * row).map_err(e)?;
        score("directions", Check::Nmse(1e-10), &got_dir, &want_dir)?;
        // layer a before the merge of this batch: p < p0 from the store then, its own rows after
        let dirs0 = dequant_dirs(&l, buf0, p0, key)?;
        let dirs = dequant_dirs(&l, &w, total, key)?;
        let (mut ra, mut rb) = (vec![0.0f32; total * row], vec![0.0f32; total * row]);
        for p in 0..total {
            for h in 0..n_kv {
                let i = p * row + h * hd;
                let (m0, m1) = (
                    half(&w, 2 * mag + p * 2 * n_kv + h),
                    half(&w, 2 * mag + p * 2 * n_kv + n_kv + h),
                );
                for k in 0..hd {
                    ra[i + k] = if p >= p0 {
                        xa[(off + p) * row + h * hd + k]
                    } else {
                        dirs0[i + k] * f16::from_bits(m0).to_f32()
                    };
                    rb[i + k] = if m1 & 0x8000 != 0 {
                        f16::from_bits(half(&w, 2 * pool + usize::from(m1 & 0x7fff) * hd + k))
                            .to_f32()
                    } else {
                        dirs[i + k] * f16::from_bits(m1).to_f32()
                    };
                }
            }
        }
        rows.push((ra, rb));
        report.push(format!("{retained} retained"));
    }
    let (ka, kb_r) = (&rows[0].0, &rows[0].1);
    let (va, vb_r) = (&rows[1].0, &rows[1].1);
    let want_a = reference(&qv, ka, va, p0, n, n_head, n_kv, hd)?;
    let want_b = reference(&qv, kb_r, vb_r, p0, n, n_head, n_kv, hd)?;
    let got_a = ctx.read_f32(&oa, n * q_dim).map_err(e)?;
    let got_b = ctx.read_f32(&ob, n * q_dim).map_err(e)?;
    let sa = score("layer a attention", Check::Nmse(1e-6), &got_a, &want_a)?;
    let sb = score("layer b attention", Check::Nmse(1e-6), &got_b, &want_b)?;
    Ok(format!(
        "{} (keys, values of {cap} slots); a {sa}, b {sb}",
        report.join(", ")
    ))
}

pub fn cases() -> Vec<(String, bool, CaseFn)> {
    let mut v: Vec<(String, bool, CaseFn)> = Vec::new();
    for (q, heads, p0, n, chunk, gamma) in [
        (KvQuant::F32, (9, 3, 64), 40, 1, 16, 0.3),
        (KvQuant::F16, (6, 2, 72), 70, 9, 32, 0.3),
        (KvQuant::Kivi4, (9, 3, 64), 63, 20, 21, 0.3),
        (KvQuant::Absmax3, (20, 5, 128), 30, 1, 30, 0.3),
        (KvQuant::Q8, (4, 4, 18), 0, 33, 1, 0.28),
        // a pool that fills (γ = 0: every pair distinct; capacity ⌈n·heads/8⌉)
        (KvQuant::Kivi2, (9, 3, 64), 50, 5, 25, 0.0),
    ] {
        v.push((
            format!(
                "minicache {} p0={p0} n={n} heads {}/{}×{} γ={gamma}",
                q.name(),
                heads.0,
                heads.1,
                heads.2
            ),
            false,
            Box::new(move |c, r| run(c, r, q, heads, p0, n, chunk, gamma)),
        ));
    }
    v
}
