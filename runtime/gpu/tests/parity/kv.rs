//! Parity of the compressed KV cache (`kv.rs`): the GPU store (`kv_store.wgsl`, every
//! `tern_format::KvQuant`) against the CPU oracle `tern_reference::kv_codec` — every code, scale,
//! zero point and f16 window row **bit for bit** (the kernels divide correctly rounded and round
//! to f16 by integer arithmetic, so no ±1 code differences are allowed) — and attention reading
//! the compressed cache against `tern_reference::attention` over the oracle's dequantized rows
//! (NMSE ≤ 1e-6; the dequantized values are the same, so it measures ~1e-13).
//!
//! Each case fills a prefix of `p0` positions in batches of `chunk` (so blocks fill across
//! batches and KIVI reads its ring from earlier submissions), then stores a batch of `n` and
//! attends with its `n` queries. Shapes: SmolLM2's heads (3×64), 2B4T's (5×128), odd ones
//! (4×18: 3-bit words straddle heads; 2×72), n = 1, a batch that fills a KIVI block in its
//! middle, decode on a block edge (p0 = R − 1, R, R + 1), KIVI groups that straddle code words
//! (G = 16 with 10 codes per word), a context exactly full, forced split counts (2B4T's heads
//! at decode: the per-channel path's quantized keys), and one
//! recorded plan replayed across block boundaries. The rotated formats (q4r, q3r, q2r): the oracle
//! rotates each head as the CPU store does (`kv_codec::rotate_heads`) before its min-max
//! quantizer, and the reference attention rotates the queries and rotates each head's output
//! back (`attend_reference`), as `tern_reference`'s model does.

use super::attn::{reference, step_buffer, write_step};
use super::*;
use half::f16;
use tern_format::{Kivi, KvQuant};
use tern_gpu::kernels::KvLayout;
use tern_gpu::Plan;
use tern_reference::kv_codec as cc;

/// Expected words of one buffer: (value, mask); mask 0 = not compared.
pub(super) type Want = Vec<(u32, u32)>;

fn put(w: &mut Want, i: usize, v: u32, mask: u32) {
    if let Some(x) = w.get_mut(i) {
        x.0 = (x.0 & !mask) | (v & mask);
        x.1 |= mask;
    }
}

fn put_half(w: &mut Want, e: usize, bits: u16) {
    let sh = 16 * (e % 2);
    put(w, e / 2, u32::from(bits) << sh, 0xffff << sh);
}

/// The oracle: the dequantized keys and values the cache holds after `n` positions of `k`, `v`
/// (`[n][row]`), and the words its buffers must hold. Rotated formats: `k_hat`, `v_hat` are in
/// the rotated space (what the cache holds); [`attend_reference`] rotates the queries to match.

pub(super) struct Oracle {
    k_hat: Vec<f32>,
    v_hat: Vec<f32>,
    pub(super) k_want: Want,
    pub(super) v_want: Want,
}

pub(super) fn oracle(l: &KvLayout, k: &[f32], v: &[f32], n: usize) -> Result<Oracle, String> {
    let row = l.row() as usize;
    let (hd, heads) = (l.head_dim as usize, l.heads as usize);
    let q = l.quant;
    let words = |key| (l.buffer_bytes(key) / 4) as usize;
    let mut o = Oracle {
        k_hat: vec![0.0; n * row],
        v_hat: vec![0.0; n * row],
        k_want: vec![(0, 0); words(true)],
        v_want: vec![(0, 0); words(false)],
    };
    let e = |e: tern_reference::ReferenceError| e.to_string();
    let par = l.param_word() as usize;
    let quantized = l.quantized(n as u64) as usize;
    for (key, x, hat, want) in [
        (true, k, &mut o.k_hat, &mut o.k_want),
        (false, v, &mut o.v_hat, &mut o.v_want),
    ] {
        match q {
            KvQuant::F32 => {
                for i in 0..n * row {
                    put(want, i, x[i].to_bits(), !0);
                    hat[i] = x[i];
                }
            }
            KvQuant::F16 => {
                for i in 0..n * row {
                    let h = cc::f16_sat(x[i]);
                    put_half(want, i, h.to_bits());
                    hat[i] = h.to_f32();
                }
            }
            KvQuant::Q8 | KvQuant::Absmax4 | KvQuant::Absmax3 => {
                for p in 0..n {
                    let qf = cc::absmax_format_at(q, p);
                    let mut codes = vec![0u32; cc::words_per_row(qf.bits(), row)];
                    let mut scales = vec![f16::ZERO; heads];
                    let xr = &x[p * row..(p + 1) * row];
                    cc::absmax_quantize_row(qf, xr, hd, &mut codes, &mut scales).map_err(e)?;
                    let base = l.code_word(p as u64) as usize;
                    for (i, &c) in codes.iter().enumerate() {
                        put(want, base + i, c, !0);
                    }
                    for (h, s) in scales.iter().enumerate() {
                        put_half(want, 2 * par + p * heads + h, s.to_bits());
                    }
                    let out = &mut hat[p * row..(p + 1) * row];
                    cc::absmax_dequantize_row(qf, &codes, &scales, hd, out).map_err(e)?;
                }
            }
            q if q.is_rotated() => {
                // each head rotated (the CPU store's `rotate_heads`), then min-max per head
                let signs = cc::rot_signs(hd);
                let wpp = cc::row_words(q, row);
                for p in 0..n {
                    let mut xr = x[p * row..(p + 1) * row].to_vec();
                    cc::rotate_heads(&mut xr, hd, &signs).map_err(e)?;
                    let mut codes = vec![0u32; wpp];
                    let (mut s, mut m) = (vec![f16::ZERO; heads], vec![f16::ZERO; heads]);
                    cc::kivi_quantize_values(q, hd, &xr, &mut codes, &mut s, &mut m).map_err(e)?;
                    let base = l.code_word(p as u64) as usize;
                    for (i, &c) in codes.iter().enumerate() {
                        put(want, base + i, c, !0);
                    }
                    for h in 0..heads {
                        let v = u32::from(s[h].to_bits()) | (u32::from(m[h].to_bits()) << 16);
                        put(want, par + p * heads + h, v, !0);
                    }
                    let out = &mut hat[p * row..(p + 1) * row];
                    cc::kivi_dequantize_values(q, hd, &codes, &s, &m, out).map_err(e)?;
                }
            }
            _ => {
                let (g, r) = (l.kivi.group as usize, l.kivi.residual as usize);
                let wpp = l.wpr() as usize;
                let f16r: Vec<f32> = x[..n * row].iter().map(|&a| cc::f16_round(a)).collect();
                if key {
                    for gi in 0..quantized / g {
                        let xs = &f16r[gi * g * row..(gi + 1) * g * row];
                        let mut codes = vec![0u32; g * wpp];
                        let (mut s, mut m) = (vec![f16::ZERO; row], vec![f16::ZERO; row]);
                        cc::kivi_quantize_keys(q, row, xs, &mut codes, &mut s, &mut m)
                            .map_err(e)?;
                        for j in 0..g {
                            let p = gi * g + j;
                            let base = l.code_word(p as u64) as usize;
                            let cw = &codes[j * wpp..(j + 1) * wpp];
                            for (i, &c) in cw.iter().enumerate() {
                                put(want, base + i, c, !0);
                            }
                            let out = &mut hat[p * row..(p + 1) * row];
                            cc::kivi_dequantize_key(q, cw, &s, &m, out).map_err(e)?;
                        }
                        for c in 0..row {
                            let v = u32::from(s[c].to_bits()) | (u32::from(m[c].to_bits()) << 16);
                            put(want, par + gi * row + c, v, !0);
                        }
                    }
                } else {
                    let ng = row.div_ceil(g);
                    for p in 0..quantized {
                        let xs = &f16r[p * row..(p + 1) * row];
                        let mut codes = vec![0u32; wpp];
                        let (mut s, mut m) = (vec![f16::ZERO; ng], vec![f16::ZERO; ng]);
                        cc::kivi_quantize_values(q, g, xs, &mut codes, &mut s, &mut m)
                            .map_err(e)?;
                        let base = l.code_word(p as u64) as usize;
                        for (i, &c) in codes.iter().enumerate() {
                            put(want, base + i, c, !0);
                        }
                        for gi in 0..ng {
                            let v = u32::from(s[gi].to_bits()) | (u32::from(m[gi].to_bits()) << 16);
                            put(want, par + p * ng + gi, v, !0);
                        }
                        let out = &mut hat[p * row..(p + 1) * row];
                        cc::kivi_dequantize_values(q, g, &codes, &s, &m, out).map_err(e)?;
                    }
                }
                let win = 2 * l.window_word(key) as usize;
                for p in quantized..n {
                    for c in 0..row {
                        let h = cc::f16_sat(x[p * row + c]);
                        put_half(want, win + (p % r) * row + c, h.to_bits());
                        hat[p * row + c] = h.to_f32();
                    }
                }
            }
        }
    }
    Ok(o)
}

/// The CPU's attention over the oracle's rows: for a rotated format as `tern_reference`'s model
/// does it (queries rotated per head, attention in the rotated space, `Hᵀ` on each head's output).
#[allow(clippy::too_many_arguments)]
pub(super) fn attend_reference(
    quant: KvQuant,
    qv: &[f32],
    or: &Oracle,
    p0: usize,
    n: usize,
    n_head: usize,
    n_kv: usize,
    hd: usize,
) -> Result<Vec<f32>, String> {
    if !quant.is_rotated() {
        return reference(qv, &or.k_hat, &or.v_hat, p0, n, n_head, n_kv, hd);
    }
    let e = |e: tern_reference::ReferenceError| e.to_string();
    let signs = cc::rot_signs(hd);
    let mut qr = qv.to_vec();
    cc::rotate_heads(&mut qr, hd, &signs).map_err(e)?;
    let mut out = reference(&qr, &or.k_hat, &or.v_hat, p0, n, n_head, n_kv, hd)?;
    cc::unrotate_heads(&mut out, hd, &signs).map_err(e)?;
    Ok(out)
}

/// Compare a buffer's words with the oracle's (masked), naming the first difference.
pub(super) fn compare(what: &str, got: &[u32], want: &Want) -> Result<usize, String> {
    let mut checked = 0;
    for (i, (&g, &(v, m))) in got.iter().zip(want).enumerate() {
        if m == 0 {
            continue;
        }
        checked += 1;
        if g & m != v & m {
            let bad = want
                .iter()
                .zip(got)
                .filter(|(w, g)| w.1 != 0 && *g & w.1 != w.0 & w.1)
                .count();
            return Err(format!(
                "{what}: word {i} is {:#010x}, the oracle's {:#010x} (mask {m:#010x}); {bad} \
                 words differ",
                g & m,
                v & m
            ));
        }
    }
    Ok(checked)
}

pub(super) fn bits_of(ctx: &GpuContext, b: &wgpu::Buffer) -> Result<Vec<u32>, String> {
    let n = (b.size() / 4) as usize;
    let f = ctx.read_f32(b, n).map_err(|e| e.to_string())?;
    Ok(f.into_iter().map(f32::to_bits).collect())
}

#[derive(Clone, Copy)]
struct Case {
    q: KvQuant,
    kivi: Kivi,
    heads: (usize, usize, usize),
    p0: usize,
    n: usize,
    /// Positions past p0 + n.
    extra: usize,
    /// Prefix batch size.
    chunk: usize,
    split: Option<u64>,
    /// `attention_prefill` (the query-tiled kernel) forced instead of `attention_with_split`.
    prefill: bool,
    /// A sliding window (`attention_windowed`: Gemma 3's local layers).
    window: Option<usize>,
}

fn run(ctx: &GpuContext, rng: &mut Rng, c: Case) -> Result<String, String> {
    let (_, n_kv, hd) = c.heads;
    let row = n_kv * hd;
    // rows with an outlier channel now and then (what KIVI's per-channel keys are for)
    let rows: Vec<f32> = (0..2 * (c.p0 + c.n) * row)
        .map(|i| rng.normal() * if i % 37 == 5 { 8.0 } else { 1.0 })
        .collect();
    let (k, v) = rows.split_at((c.p0 + c.n) * row);
    run_rows(ctx, rng, c, k, v)
}

/// [`run`] with given key and value rows (`[p0 + n][row]` each).
fn run_rows(
    ctx: &GpuContext,
    rng: &mut Rng,
    c: Case,
    k: &[f32],
    v: &[f32],
) -> Result<String, String> {
    let (n_head, n_kv, hd) = c.heads;
    let (p0, n) = (c.p0, c.n);
    let n_ctx = p0 + n + c.extra;
    let (row, q_dim) = (n_kv * hd, n_head * hd);
    let e = |e: GpuError| e.to_string();
    let l = KvLayout::new(c.q, c.kivi, n_kv as u64, hd as u64, n_ctx as u64).map_err(e)?;
    if k.len() != (p0 + n) * row || v.len() != k.len() {
        return Err(format!(
            "{} key values for {} positions of {row}",
            k.len(),
            p0 + n
        ));
    }
    let kb = ctx.zeroed("k", l.buffer_bytes(true)).map_err(e)?;
    let vb = ctx.zeroed("v", l.buffer_bytes(false)).map_err(e)?;
    let store = |start: usize, len: usize| -> Result<(), String> {
        let ks = ctx
            .upload("k rows", &f32_bytes(&k[start * row..(start + len) * row]))
            .map_err(e)?;
        let vs = ctx
            .upload("v rows", &f32_bytes(&v[start * row..(start + len) * row]))
            .map_err(e)?;
        let step = step_buffer(ctx, start as u32, len as u32);
        let mut enc = ctx.encoder();
        let nn = len as u64;
        tern_gpu::kernels::kv_store(ctx, &mut enc, &l, &step, &ks, &kb, nn, true).map_err(e)?;
        tern_gpu::kernels::kv_store(ctx, &mut enc, &l, &step, &vs, &vb, nn, false).map_err(e)?;
        ctx.submit_wait(enc).map_err(e)
    };
    let mut at = 0;
    while at < p0 {
        let len = c.chunk.min(p0 - at);
        store(at, len)?;
        at += len;
    }
    store(p0, n)?;
    let or = oracle(&l, k, v, p0 + n)?;
    let ck = compare("keys", &bits_of(ctx, &kb)?, &or.k_want)?;
    let cv = compare("values", &bits_of(ctx, &vb)?, &or.v_want)?;
    let qv: Vec<f32> = (0..n * q_dim).map(|_| rng.normal()).collect();
    let qb = ctx.upload("q", &f32_bytes(&qv)).map_err(e)?;
    let ob = ctx.zeroed("out", (n * q_dim * 4) as u64).map_err(e)?;
    let step = step_buffer(ctx, p0 as u32, n as u32);
    let scale = 1.0 / (hd as f32).sqrt();
    let mut enc = ctx.encoder();
    let nh = n_head as u64;
    if let Some(w) = c.window {
        let (nn, kv) = (n as u64, (&kb, &vb));
        tern_gpu::kernels::attention_windowed(
            ctx, &mut enc, &l, &step, &qb, kv, &ob, nn, nh, scale, c.split, w as u64,
        )
    } else if c.prefill {
        tern_gpu::kernels::attention_prefill(
            ctx, &mut enc, &l, &step, &qb, &kb, &vb, &ob, n as u64, nh, scale,
        )
    } else {
        tern_gpu::kernels::attention_with_split(
            ctx, &mut enc, &l, &step, &qb, &kb, &vb, &ob, n as u64, nh, scale, c.split,
        )
    }
    .map_err(e)?;
    ctx.submit_wait(enc).map_err(e)?;
    let want = match c.window {
        Some(w) if !c.q.is_rotated() => super::family::reference_windowed(
            &qv,
            (&or.k_hat, &or.v_hat),
            p0,
            n,
            (n_head, n_kv, hd),
            w,
        )?,
        Some(_) => return Err("no windowed case over a rotated cache in the table".into()),
        None => attend_reference(c.q, &qv, &or, p0, n, n_head, n_kv, hd)?,
    };
    let got = ctx.read_f32(&ob, n * q_dim).map_err(e)?;
    score("attention", Check::Nmse(1e-6), &got, &want)
        .map(|s| format!("{ck}+{cv} words bit-exact, {s}"))
}

/// One plan (store ×2 + attention for one token) replayed at each of `p0s` in order (each
/// position once, from 0), the step buffer rewritten in between: the KIVI blocks fill inside a
/// replay, and the attention output matches the oracle at every step.
fn run_replay(ctx: &GpuContext, rng: &mut Rng, q: KvQuant, kivi: Kivi) -> Result<String, String> {
    // (the rotated formats need a power-of-two head_dim)
    let hd = if q.is_rotated() { 64 } else { 72 };
    let (n_head, n_kv, n_ctx) = (6usize, 2usize, 100usize);
    let (row, q_dim) = (n_kv * hd, n_head * hd);
    let e = |e: GpuError| e.to_string();
    let l = KvLayout::new(q, kivi, n_kv as u64, hd as u64, n_ctx as u64).map_err(e)?;
    let kb = ctx.zeroed("k", l.buffer_bytes(true)).map_err(e)?;
    let vb = ctx.zeroed("v", l.buffer_bytes(false)).map_err(e)?;
    let knb = ctx.zeroed("knew", (row * 4) as u64).map_err(e)?;
    let vnb = ctx.zeroed("vnew", (row * 4) as u64).map_err(e)?;
    let qb = ctx.zeroed("q", (q_dim * 4) as u64).map_err(e)?;
    let ob = ctx.zeroed("out", (q_dim * 4) as u64).map_err(e)?;
    let step = step_buffer(ctx, 0, 1);
    let mut plan = Plan::new();
    tern_gpu::kernels::kv_store(ctx, &mut plan, &l, &step, &knb, &kb, 1, true).map_err(e)?;
    tern_gpu::kernels::kv_store(ctx, &mut plan, &l, &step, &vnb, &vb, 1, false).map_err(e)?;
    let (nh, scale) = (n_head as u64, 1.0 / (hd as f32).sqrt());
    tern_gpu::kernels::attention(ctx, &mut plan, &l, &step, &qb, &kb, &vb, &ob, 1, nh, scale)
        .map_err(e)?;
    let (mut k, mut v) = (Vec::new(), Vec::new());
    let mut worst = 0.0f64;
    for p0 in 0..n_ctx {
        let knew: Vec<f32> = (0..row).map(|_| rng.normal()).collect();
        let vnew: Vec<f32> = (0..row).map(|_| rng.normal()).collect();
        let qv: Vec<f32> = (0..q_dim).map(|_| rng.normal()).collect();
        ctx.write(&knb, &f32_bytes(&knew));
        ctx.write(&vnb, &f32_bytes(&vnew));
        ctx.write(&qb, &f32_bytes(&qv));
        write_step(ctx, &step, p0 as u32, 1);
        let mut enc = ctx.encoder();
        plan.encode(&mut enc);
        ctx.submit_wait(enc).map_err(e)?;
        k.extend(knew);
        v.extend(vnew);
        let or = oracle(&l, &k, &v, p0 + 1)?;
        let want = attend_reference(q, &qv, &or, p0, 1, n_head, n_kv, hd)?;
        let got = ctx.read_f32(&ob, q_dim).map_err(e)?;
        score(
            &format!("replay at p0 = {p0}"),
            Check::Nmse(1e-6),
            &got,
            &want,
        )?;
        worst = worst.max(nmse(&got, &want));
        if p0 + 1 == n_ctx {
            compare("keys", &bits_of(ctx, &kb)?, &or.k_want)?;
            compare("values", &bits_of(ctx, &vb)?, &or.v_want)?;
        }
    }
    Ok(format!(
        "{n_ctx} steps, worst nmse {worst:.2e}, cache bit-exact"
    ))
}

/// A compressed cache over the binding limit is refused naming the largest context that fits,
/// and that context is accepted.
fn run_too_large(ctx: &GpuContext, _rng: &mut Rng) -> Result<String, String> {
    let l = KvLayout::new(KvQuant::Kivi3, Kivi::default(), 2, 64, 1).map_err(|e| e.to_string())?;
    let max = l.max_positions_within(ctx.binding_limit());
    let over = KvLayout {
        n_ctx: max + 1,
        ..l
    };
    let fits = KvLayout { n_ctx: max, ..l };
    match (over.check_binding(ctx), fits.check_binding(ctx)) {
        (Err(GpuError::TooLarge { detail, .. }), Ok(()))
            if detail.contains(&format!("at most {max} positions")) =>
        {
            Ok(format!("q3 refused at {} positions: {detail}", max + 1))
        }
        other => Err(format!("expected TooLarge then Ok, got {other:?}")),
    }
}

pub fn cases() -> Vec<(String, bool, CaseFn)> {
    let mut v: Vec<(String, bool, CaseFn)> = Vec::new();
    let dflt = Kivi::default();
    let small = Kivi {
        group: 16,
        residual: 48,
    };
    let base = |q, heads, p0, n, extra, chunk| Case {
        q,
        kivi: dflt,
        heads,
        p0,
        n,
        extra,
        chunk,
        split: None,
        prefill: false,
        window: None,
    };
    let mut list = Vec::new();
    for q in KvQuant::ALL
        .into_iter()
        .filter(|&q| q != KvQuant::F32 && q.is_rotated())
    {
        // The rotated formats (power-of-two head_dim): SmolLM2's and 2B4T's heads at n = 1, an
        // odd batch over a prefix stored in odd chunks, decode after it, 16-dim heads (q3r: two
        // heads share a unit of 3 words; 3 heads: a unit of one head last), forced splits (the
        // split-K partials rotated back before the merge), a context exactly full.
        list.push(base(q, (9, 3, 64), 0, 1, 2, 1));
        list.push(base(q, (9, 3, 64), 100, 61, 5, 37));
        list.push(base(q, (20, 5, 128), 127, 1, 3, 64));
        list.push(base(q, (20, 5, 128), 13, 7, 0, 5));
        list.push(base(q, (8, 4, 16), 128, 1, 0, 50));
        list.push(base(q, (6, 3, 16), 30, 3, 1, 7));
        list.push(Case {
            split: Some(5),
            ..base(q, (20, 5, 128), 300, 1, 0, 128)
        });
        list.push(Case {
            split: Some(7),
            ..base(q, (9, 3, 64), 95, 2, 0, 13)
        });
    }
    for q in KvQuant::ALL
        .into_iter()
        .filter(|&q| q != KvQuant::F32 && !q.is_rotated())
    {
        // n = 1 at an empty cache; a prefill that fills a block mid-batch and ends inside the
        // next; decode on the block edges; SmolLM2, 2B4T and odd heads
        list.push(base(q, (9, 3, 64), 0, 1, 2, 1));
        list.push(base(q, (9, 3, 64), 100, 60, 5, 37));
        list.push(base(q, (20, 5, 128), 127, 1, 3, 64));
        list.push(base(q, (4, 4, 18), 128, 1, 0, 50));
        list.push(base(q, (6, 2, 72), 300, 3, 0, 128));
        if q.is_kivi() {
            // G = 16 (groups straddle 3-bit words), R = 48; exactly full; forced splits
            list.push(Case {
                kivi: small,
                split: Some(7),
                ..base(q, (9, 3, 64), 95, 2, 0, 13)
            });
            list.push(Case {
                kivi: small,
                ..base(q, (4, 4, 18), 47, 50, 1, 47)
            });
            // 2B4T's heads split as decode splits them (the per-channel path's quantized keys:
            // `attention.wgsl`'s kivi_key_dot), a chunk not aligned to G
            list.push(Case {
                split: Some(5),
                ..base(q, (20, 5, 128), 300, 1, 0, 128)
            });
        }
    }
    // sliding windows (Gemma 3's local layers) over every compressed format: Gemma 3's heads at
    // decode (split and not) and a batch, odd heads with KIVI's small groups
    for q in KvQuant::ALL
        .into_iter()
        .filter(|&q| q != KvQuant::F32 && !q.is_rotated())
    {
        list.push(Case {
            window: Some(32),
            ..base(q, (4, 1, 256), 300, 1, 2, 64)
        });
        list.push(Case {
            window: Some(50),
            split: Some(5),
            ..base(q, (4, 1, 256), 300, 1, 2, 64)
        });
        list.push(Case {
            window: Some(7),
            ..base(q, (4, 1, 256), 100, 20, 0, 37)
        });
        if q.is_kivi() {
            list.push(Case {
                kivi: small,
                window: Some(40),
                split: Some(3),
                ..base(q, (9, 3, 64), 95, 2, 0, 13)
            });
        }
    }
    // f16 through the query-tiled prefill kernel, forced (SmolLM2's and 2B4T's heads, head_dim 16
    // and 48: the 16-dim tail step; a batch over a prefix stored in earlier submissions, token
    // tiles straddling a 64-key tile)
    for (heads, p0, n) in [
        ((9, 3, 64), 100, 60),
        ((20, 5, 128), 13, 40),
        ((4, 2, 16), 3, 21),
        ((6, 3, 48), 10, 30),
    ] {
        list.push(Case {
            prefill: true,
            ..base(KvQuant::F16, heads, p0, n, 3, 37)
        });
    }
    for c in list {
        let name = format!(
            "kv {} G{}/R{} p0={} n={} heads {}/{}×{} n_ctx={}{}",
            c.q.name(),
            c.kivi.group,
            c.kivi.residual,
            c.p0,
            c.n,
            c.heads.0,
            c.heads.1,
            c.heads.2,
            c.p0 + c.n + c.extra,
            c.split.map_or(String::new(), |s| format!(" {s} splits"))
                + if c.prefill { " prefill kernel" } else { "" }
                + &c.window.map_or(String::new(), |w| format!(" window {w}"))
        );
        v.push((name, false, Box::new(move |ctx, r| run(ctx, r, c))));
    }
    for q in [
        KvQuant::Kivi3,
        KvQuant::Absmax3,
        KvQuant::F16,
        KvQuant::Rot3,
    ] {
        v.push((
            format!("kv {} plan replayed at p0 = 0..100 (G16/R48)", q.name()),
            false,
            Box::new(move |ctx, r| run_replay(ctx, r, q, small)),
        ));
    }
    v.push((
        "kv q3 cache over the binding limit → TooLarge naming what fits".into(),
        true,
        Box::new(run_too_large),
    ));
    v
}

/// GPL-3's first 64 tokens as SmolLM2's tokenizer splits them (the `tern perplexity -f GPL-3`
/// window, `Model::perplexity_tokens`).
const GPL3_TOKENS: [u32; 64] = [
    42185, 28807, 35185, 49126, 35696, 45581, 41026, 16997, 13867, 216, 35, 28, 216, 34, 41, 4019,
    216, 34, 32, 32, 39, 1116, 10504, 365, 51, 25, 216, 34, 32, 32, 39, 7664, 12316, 6208, 28,
    5829, 30, 2067, 4687, 1742, 9269, 86, 30, 2295, 23720, 198, 14607, 314, 12738, 288, 3784, 284,
    14827, 6936, 46572, 10017, 198, 282, 451, 9768, 3140, 28, 564, 4340,
];

/// Real data (issue 14's GPU/CPU perplexity gap was suspected to be data-dependent): SmolLM2-135M's
/// own keys (after RoPE) and values for GPL-3's first 64 tokens, every layer, as the CPU
/// reference computes them — heads whose absmax is one outlier channel (scales of ~0.1 in q8, so
/// most codes are small and many values sit near rounding ties), the first token's large rows —
/// stored by the GPU in every format and compared with the oracle bit for bit, then attended
/// (NMSE ≤ 1e-6). KIVI with G = 16, R = 32: the prefix goes in batches of 21 (a block fills in
/// the middle of a batch), position 63 alone (the one-token path fills the second block).
#[test]
fn parity_kv_real_smollm2() {
    let Some(ctx) = context(None) else { return };
    let path = tern_tests::scratch("parity_kv_real").join("smollm2.tern");
    tern_import::gguf_import::import_gguf(
        &tern_tests::smollm2_gguf(),
        &path,
        &Default::default(),
        &mut |_, _, _| {},
    )
    .unwrap();
    let file = tern_format::TernFile::open(&path).unwrap();
    let hp = file.meta().hparams.clone();
    let model = tern_reference::Model::load(&file).unwrap();
    let n = GPL3_TOKENS.len();
    let mut cache = tern_reference::KvCache::for_hparams(&hp, n).unwrap();
    model
        .forward(&GPL3_TOKENS, &mut cache, tern_reference::LogitsWanted::None)
        .unwrap();
    let heads = (
        hp.n_head as usize,
        hp.n_head_kv as usize,
        hp.head_dim as usize,
    );
    let row = heads.1 * heads.2;
    let mut rng = Rng(14);
    let mut failures = Vec::new();
    let mut done = 0;
    for q in KvQuant::ALL.into_iter().filter(|&q| q != KvQuant::F32) {
        for layer in 0..hp.n_layer as usize {
            let (k, v) = cache.layer(layer);
            let c = Case {
                q,
                kivi: Kivi {
                    group: 16,
                    residual: 32,
                },
                heads,
                p0: n - 1,
                n: 1,
                extra: 0,
                chunk: 21,
                split: None,
                window: None,
                prefill: false,
            };
            match run_rows(&ctx, &mut rng, c, &k[..n * row], &v[..n * row]) {
                Ok(r) if layer == 0 => eprintln!("ok   kv {} SmolLM2 layer 0: {r}", q.name()),
                Ok(_) => {}
                Err(e) => failures.push(format!("kv {} SmolLM2 layer {layer}: {e}", q.name())),
            }
            done += 1;
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    eprintln!("{done} real-data cases (format × layer) bit-exact");
}
