//! Parity of `kernels::sample_candidates` (GPU sampling): the set-aside logits of the penalized
//! ids (bit-exact, NaN for ids past the vocabulary, NaN left in their place), the top-64 of the
//! rest (bit-exact against a sort by (value desc, index asc), ties and NaN included, vocabularies
//! not a multiple of any workgroup size, fewer logits than 64), the max (bit-exact) and
//! Σ exp((x − max)/T) (relative error ≤ 1e-5 against an f64 sum).

use super::*;
use tern_gpu::kernels::{sample_candidates, SampleBufs, SampleCandidates, SAMPLE_K};

fn run_sample(
    ctx: &GpuContext,
    rng: &mut Rng,
    n: usize,
    n_hist: usize,
    ties: bool,
    temp: f32,
) -> Result<String, String> {
    let mut logits: Vec<f32> = (0..n).map(|_| rng.normal() * 4.0).collect();
    if ties {
        for x in &mut logits {
            *x = (*x).round();
        }
        if n > 20 {
            logits[7] = f32::NAN;
            logits[n - 2] = f32::NEG_INFINITY;
        }
    }
    // distinct ids, one past the vocabulary when there is room
    let mut hist: Vec<u32> = Vec::new();
    while hist.len() < n_hist {
        let id = (rng.next() % (n as u64 + 2)) as u32;
        if !hist.contains(&id) {
            hist.push(id);
        }
    }
    // reference
    let mut masked = logits.clone();
    let want_hist: Vec<f32> = hist
        .iter()
        .map(|&id| match masked.get_mut(id as usize) {
            Some(x) => std::mem::replace(x, f32::NAN),
            None => f32::NAN,
        })
        .collect();
    let mut top: Vec<(u32, f32)> = masked
        .iter()
        .enumerate()
        .filter(|(_, x)| !x.is_nan())
        .map(|(i, &x)| (i as u32, x))
        .collect();
    top.sort_by(|a, b| {
        b.1.partial_cmp(&a.1)
            .unwrap_or(std::cmp::Ordering::Equal)
            .then(a.0.cmp(&b.0))
    });
    top.truncate(SAMPLE_K as usize);
    let live: Vec<f32> = masked
        .iter()
        .copied()
        .filter(|x| !x.is_nan() && *x > f32::NEG_INFINITY)
        .collect();
    let m = live.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let t = if temp > 0.0 { f64::from(temp) } else { 1.0 };
    let s: f64 = live
        .iter()
        .map(|&x| ((f64::from(x) - f64::from(m)) / t).exp())
        .sum();

    let e = |e: GpuError| e.to_string();
    let lb = ctx.upload("logits", &f32_bytes(&logits)).map_err(e)?;
    let bufs = SampleBufs::alloc(ctx).map_err(e)?;
    bufs.write_ctl(ctx, &hist, temp).map_err(e)?;
    let mut enc = ctx.encoder();
    sample_candidates(ctx, &mut enc, &lb, n as u64, &bufs).map_err(e)?;
    ctx.submit_wait(enc).map_err(e)?;
    let words = ctx
        .read_u32(&bufs.out, tern_gpu::kernels::sample::SAMPLE_OUT_WORDS)
        .map_err(e)?;
    let got = SampleCandidates::from_words(&words, &hist).map_err(e)?;
    let bits = |v: &[(u32, f32)]| v.iter().map(|p| (p.0, p.1.to_bits())).collect::<Vec<_>>();
    if bits(&got.top) != bits(&top) {
        return Err(format!(
            "top-k differs: gpu {:?}… vs reference {:?}…",
            &got.top[..got.top.len().min(4)],
            &top[..top.len().min(4)]
        ));
    }
    for ((id, g), w) in got.hist.iter().zip(&want_hist) {
        if g.to_bits() != w.to_bits() && !(g.is_nan() && w.is_nan()) {
            return Err(format!("penalized id {id}: gpu {g} vs {w}"));
        }
    }
    if got.max.to_bits() != m.to_bits() {
        return Err(format!("max: gpu {} vs {m}", got.max));
    }
    let rel = (f64::from(got.sum) - s).abs() / s.max(f64::MIN_POSITIVE);
    if rel > 1e-5 {
        return Err(format!(
            "sum: gpu {} vs {s} (relative error {rel:.2e})",
            got.sum
        ));
    }
    // the penalized logits are NaN in place, the others untouched
    let after = ctx.read_f32(&lb, n).map_err(e)?;
    for (i, (a, b)) in after.iter().zip(&masked).enumerate() {
        if a.to_bits() != b.to_bits() && !(a.is_nan() && b.is_nan()) {
            return Err(format!("logit {i} is {a} after the step, expected {b}"));
        }
    }
    Ok(format!("bit-exact, sum relative error {rel:.1e}"))
}

pub fn cases() -> Vec<(String, bool, CaseFn)> {
    let mut v: Vec<(String, bool, CaseFn)> = Vec::new();
    for (n, n_hist, ties, temp) in [
        (1usize, 0usize, false, 1.0f32),
        (50, 5, false, 0.7),
        (1000, 0, false, 1.0),
        (4097, 13, true, 0.8),
        (5001, 64, true, 0.0),
        (49152, 64, false, 1.0),
        (128256, 33, true, 1.3),
    ] {
        let what = if ties { " ties/NaN/-inf" } else { "" };
        v.push((
            format!("sample_candidates n={n} penalized {n_hist} T={temp}{what}"),
            false,
            Box::new(move |c, r| run_sample(c, r, n, n_hist, ties, temp)),
        ));
    }
    v
}
