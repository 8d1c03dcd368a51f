//! Causal GQA attention over a compressed KV cache: keys and values are dequantized a tile of
//! [`TILE`] positions at a time (tiles at absolute positions `0, TILE, 2·TILE, …`) and folded
//! into an online softmax per query and head, in position order. Each query's result depends
//! only on the cache's contents, not on the batch it is in or the thread count.
//!
//! The rotated formats (q4r/q3r/q2r, `tern_format::kv`) store `H·k` and `H·v` per kv-head;
//! [`Rotation`] turns a layer's queries, keys and values into that space before the store and
//! the scores (`(Hq)·(Hk) = q·k`) and the attention output back (`Hᵀ·Σ p·Hv = Σ p·v`).

use crate::error::{check_len, ReferenceError, Result};
use crate::kernels::dot_f32;
use crate::par_map;

/// Positions dequantized at once.
pub const TILE: usize = 32;

/// Queries per parallel job (each job dequantizes the tiles it needs once).
const QUERY_CHUNK: usize = 16;

/// Reads position `p`'s key and value rows (dequantized) into the two slices.
pub type RowReader<'a> = dyn Fn(usize, &mut [f32], &mut [f32]) -> Result<()> + Sync + 'a;

/// The per-head rotation of the rotated formats (`None` for every other format).
#[derive(Debug, Clone)]
pub struct Rotation {
    signs: Vec<f32>,
    head_dim: usize,
}

impl Rotation {
    /// The rotation of format `q` for heads of `head_dim` values (`None` when `q` is not rotated).
    pub fn for_format(q: tern_format::kv::KvQuant, head_dim: usize) -> Option<Self> {
        q.is_rotated().then(|| Rotation {
            signs: crate::kv_codec::rot_signs(head_dim),
            head_dim,
        })
    }

    /// `H·x` per head (queries, keys after RoPE, values).
    pub fn rotate(&self, x: &[f32]) -> Result<Vec<f32>> {
        let mut y = x.to_vec();
        crate::kv_codec::rotate_heads(&mut y, self.head_dim, &self.signs)?;
        Ok(y)
    }

    /// `x ← Hᵀ·x` per head (the attention output).
    pub fn unrotate(&self, x: &mut [f32]) -> Result<()> {
        crate::kv_codec::unrotate_heads(x, self.head_dim, &self.signs)
    }
}

/// The shape of one attention call.
#[derive(Debug, Clone, Copy)]
pub struct AttnShape {
    pub n_head: usize,
    pub n_head_kv: usize,
    pub head_dim: usize,
}

/// Attention of `n` queries `q` (`[n][n_head·head_dim]`) at positions `p0..p0+n`, each over
/// positions `0..=p0+i`, reading key/value rows through `read(p, k_row, v_row)`. `out`: like `q`.
pub fn attention_tiled(
    q: &[f32],
    p0: usize,
    shape: AttnShape,
    read: &RowReader<'_>,
    out: &mut [f32],
    parallel: bool,
) -> Result<()> {
    let AttnShape {
        n_head,
        n_head_kv,
        head_dim: hd,
    } = shape;
    if n_head_kv == 0 || hd == 0 || n_head % n_head_kv != 0 {
        return Err(ReferenceError::shape(
            "attention",
            format!("n_head {n_head} is not a multiple of n_head_kv {n_head_kv}"),
        ));
    }
    let q_dim = n_head * hd;
    let row = n_head_kv * hd;
    let n = q.len() / q_dim;
    check_len("attention", "q", q.len(), n * q_dim)?;
    check_len("attention", "out", out.len(), q.len())?;
    let group = n_head / n_head_kv;
    let scale = 1.0 / (hd as f32).sqrt();
    let chunks = n.div_ceil(QUERY_CHUNK);
    let run = |c: usize| -> Result<Vec<f32>> {
        let i0 = c * QUERY_CHUNK;
        let i1 = (i0 + QUERY_CHUNK).min(n);
        let last = p0 + i1; // positions 0..last are read
        let mut kt = vec![0.0f32; TILE * row];
        let mut vt = vec![0.0f32; TILE * row];
        // Per query and head: running max, sum, accumulator.
        let nq = i1 - i0;
        let mut mx = vec![f32::NEG_INFINITY; nq * n_head];
        let mut sum = vec![0.0f32; nq * n_head];
        let mut acc = vec![0.0f32; nq * q_dim];
        let mut s = [0.0f32; TILE];
        for t0 in (0..last).step_by(TILE) {
            let t1 = (t0 + TILE).min(last);
            for p in t0..t1 {
                let o = (p - t0) * row;
                let (Some(k), Some(v)) = (kt.get_mut(o..o + row), vt.get_mut(o..o + row)) else {
                    continue;
                };
                read(p, k, v)?;
            }
            for qi in 0..nq {
                let pos = p0 + i0 + qi;
                if pos < t0 {
                    continue;
                }
                let end = (pos + 1).min(t1);
                let qrow = q
                    .get((i0 + qi) * q_dim..(i0 + qi + 1) * q_dim)
                    .unwrap_or_default();
                for h in 0..n_head {
                    let off = (h / group) * hd;
                    let qh = qrow.get(h * hd..(h + 1) * hd).unwrap_or_default();
                    let mut m = f32::NEG_INFINITY;
                    for (j, p) in (t0..end).enumerate() {
                        let o = (p - t0) * row + off;
                        let kr = kt.get(o..o + hd).unwrap_or_default();
                        let v = dot_f32(qh, kr) * scale;
                        if let Some(x) = s.get_mut(j) {
                            *x = v;
                        }
                        m = m.max(v);
                    }
                    let st = qi * n_head + h;
                    let (Some(mo), Some(so)) = (mx.get(st).copied(), sum.get(st).copied()) else {
                        continue;
                    };
                    let m_new = mo.max(m);
                    let corr = if mo == f32::NEG_INFINITY {
                        0.0
                    } else {
                        (mo - m_new).exp()
                    };
                    let a = acc
                        .get_mut(qi * q_dim + h * hd..qi * q_dim + (h + 1) * hd)
                        .unwrap_or_default();
                    for x in a.iter_mut() {
                        *x *= corr;
                    }
                    let mut add = 0.0f32;
                    for (j, p) in (t0..end).enumerate() {
                        let w = (s.get(j).copied().unwrap_or(0.0) - m_new).exp();
                        add += w;
                        let o = (p - t0) * row + off;
                        let vr = vt.get(o..o + hd).unwrap_or_default();
                        for (x, &vv) in a.iter_mut().zip(vr) {
                            *x += w * vv;
                        }
                    }
                    if let (Some(mm), Some(ss)) = (mx.get_mut(st), sum.get_mut(st)) {
                        *mm = m_new;
                        *ss = so * corr + add;
                    }
                }
            }
        }
        for (st, l) in sum.iter().enumerate() {
            let inv = if *l > 0.0 { 1.0 / l } else { 0.0 };
            let (qi, h) = (st / n_head, st % n_head);
            for x in acc
                .get_mut(qi * q_dim + h * hd..qi * q_dim + (h + 1) * hd)
                .unwrap_or_default()
            {
                *x *= inv;
            }
        }
        Ok(acc)
    };
    for (c, r) in par_map(chunks, parallel, run).into_iter().enumerate() {
        let r = r?;
        let i0 = c * QUERY_CHUNK;
        if let Some(d) = out.get_mut(i0 * q_dim..i0 * q_dim + r.len()) {
            d.copy_from_slice(&r);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::attention;

    #[test]
    fn tiled_attention_equals_the_plain_one_on_f32_rows() {
        let (n_head, n_head_kv, hd) = (6, 2, 8);
        let row = n_head_kv * hd;
        let n_kv = 77; // several tiles and a partial one
        let mut seed = 1u32;
        let mut rnd = || {
            seed = seed.wrapping_mul(1_103_515_245).wrapping_add(12345);
            (seed >> 8) as f32 / (1u32 << 24) as f32 - 0.5
        };
        let k: Vec<f32> = (0..n_kv * row).map(|_| rnd() * 3.0).collect();
        let v: Vec<f32> = (0..n_kv * row).map(|_| rnd()).collect();
        let p0 = 60;
        let n = n_kv - p0;
        let q: Vec<f32> = (0..n * n_head * hd).map(|_| rnd() * 2.0).collect();
        let read = |p: usize, kr: &mut [f32], vr: &mut [f32]| -> Result<()> {
            kr.copy_from_slice(&k[p * row..(p + 1) * row]);
            vr.copy_from_slice(&v[p * row..(p + 1) * row]);
            Ok(())
        };
        let shape = AttnShape {
            n_head,
            n_head_kv,
            head_dim: hd,
        };
        let mut out = vec![0.0; q.len()];
        attention_tiled(&q, p0, shape, &read, &mut out, true).unwrap();
        let mut one = vec![0.0; q.len()];
        // Query by query (a decode step each) gives the same bits.
        for i in 0..n {
            let qi = &q[i * n_head * hd..(i + 1) * n_head * hd];
            attention_tiled(
                qi,
                p0 + i,
                shape,
                &read,
                &mut one[i * n_head * hd..(i + 1) * n_head * hd],
                false,
            )
            .unwrap();
        }
        assert_eq!(out, one);
        for i in 0..n {
            let qi = &q[i * n_head * hd..(i + 1) * n_head * hd];
            let mut want = vec![0.0; n_head * hd];
            attention(qi, &k, &v, p0 + i + 1, n_head, n_head_kv, hd, &mut want).unwrap();
            for (a, b) in out[i * n_head * hd..(i + 1) * n_head * hd]
                .iter()
                .zip(&want)
            {
                assert!((a - b).abs() < 1e-5, "{a} vs {b}");
            }
        }
    }

    /// Attention in the rotated space (queries, keys and values rotated per head, the output
    /// rotated back) equals the plain attention: `(Hq)·(Hk) = q·k` and `Hᵀ Σ p·Hv = Σ p·v`.
    #[test]
    fn rotated_attention_equals_the_plain_one() {
        let (n_head, n_head_kv, hd) = (4, 2, 16);
        let row = n_head_kv * hd;
        let n_kv = 40;
        let mut seed = 7u32;
        let mut rnd = || {
            seed = seed.wrapping_mul(1_103_515_245).wrapping_add(12345);
            (seed >> 8) as f32 / (1u32 << 24) as f32 - 0.5
        };
        let k: Vec<f32> = (0..n_kv * row).map(|_| rnd() * 3.0).collect();
        let v: Vec<f32> = (0..n_kv * row).map(|_| rnd()).collect();
        let q: Vec<f32> = (0..n_head * hd).map(|_| rnd() * 2.0).collect();
        let rot = Rotation::for_format(tern_format::kv::KvQuant::Rot4, hd).unwrap();
        assert!(Rotation::for_format(tern_format::kv::KvQuant::Kivi4, hd).is_none());
        let (hk, hv, hq) = (
            rot.rotate(&k).unwrap(),
            rot.rotate(&v).unwrap(),
            rot.rotate(&q).unwrap(),
        );
        let read = |p: usize, kr: &mut [f32], vr: &mut [f32]| -> Result<()> {
            kr.copy_from_slice(&hk[p * row..(p + 1) * row]);
            vr.copy_from_slice(&hv[p * row..(p + 1) * row]);
            Ok(())
        };
        let shape = AttnShape {
            n_head,
            n_head_kv,
            head_dim: hd,
        };
        let mut out = vec![0.0; q.len()];
        attention_tiled(&hq, n_kv - 1, shape, &read, &mut out, false).unwrap();
        rot.unrotate(&mut out).unwrap();
        let mut want = vec![0.0; q.len()];
        attention(&q, &k, &v, n_kv, n_head, n_head_kv, hd, &mut want).unwrap();
        for (a, b) in out.iter().zip(&want) {
            assert!((a - b).abs() < 1e-5, "{a} vs {b}");
        }
    }
}
