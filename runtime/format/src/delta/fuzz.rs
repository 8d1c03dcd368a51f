//! Fuzzing entries and seeds for the delta decoder.

use super::*;

#[doc(hidden)]
/// Fuzzing entry (`fuzz/fuzz_targets/delta_decode.rs`): first byte even → [`fuzz_chunk`] on the
/// rest; odd → the rest as a `.ternd` file: validated, then every `chunks` record decoded against
/// a zero base of its size (at most 16 MiB). Must never panic.
pub fn fuzz_input(data: &[u8]) {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    if mode % 2 == 0 {
        return fuzz_chunk(rest);
    }
    let Ok(d) = DeltaFile::from_bytes(rest.to_vec()) else {
        return;
    };
    let _ = d.tensor_sizes();
    for (r, chunks) in d.index.tensors.iter().zip(&d.chunks) {
        if r.method != Method::Chunks || r.info.size > 1 << 24 {
            continue;
        }
        let Ok(ctx) = ctx_of(&r.info, r.method) else {
            continue;
        };
        let base = vec![0u8; r.info.size as usize]; // ok: ≤ 16 MiB
        let mut out = vec![0u8; base.len()];
        let _ = decode_chunks(d.bytes(), chunks, ctx, &base, &mut out, 1);
    }
}

/// The context and base bytes [`fuzz_chunk`] uses for selector byte `sel`.
pub(super) fn fuzz_setup(sel: u8) -> (Ctx, Vec<u8>) {
    let len = (usize::from(sel >> 3) + 1) * 40;
    let mut base: Vec<u8> = (0..len as u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8)
        .collect();
    let ctx = match sel % 4 {
        0 => Ctx::Float(Width::W16),
        1 => {
            let base3 = sel & 4 != 0;
            if !base3 {
                base.iter_mut().for_each(|b| *b &= 0x55); // valid 2-bit codes (0 or 1)
            }
            Ctx::Ternary {
                layout: if base3 {
                    TernaryLayout::Base3
                } else {
                    TernaryLayout::Bits2
                },
                cols: if base3 { 200 } else { 160 },
                row_bytes: 40,
                codes_len: len,
                scale: Width::W32,
            }
        }
        2 => Ctx::Ggml(GgmlLayout {
            block_bytes: 20,
            scales: [0, 2],
            n_scales: 2,
        }),
        _ => Ctx::Other,
    };
    (ctx, base)
}

#[doc(hidden)]
/// Fuzzing entry: the first byte selects a tensor context and base ([`fuzz_setup`]); the rest is
/// decoded as one chunk of every kind. Must never panic.
pub fn fuzz_chunk(data: &[u8]) {
    let Some((&sel, rest)) = data.split_first() else {
        return;
    };
    let (ctx, base) = fuzz_setup(sel);
    let mut out = vec![0u8; base.len()];
    for kind in [K_FM16, K_FM32, K_SPARSE, K_TERNARY, K_GGML] {
        let _ = decode_chunk(kind, ctx, rest, &base, &mut out);
    }
}

#[doc(hidden)]
/// Valid inputs for `fuzz_input` (fuzz seeds): one chunk of each kind, each prefixed by the
/// even mode byte and its selector.
pub fn fuzz_seeds() -> Vec<(String, Vec<u8>)> {
    let mut seeds = Vec::new();
    for (name, sel, kind) in [
        ("fm16", 3u8 << 3, K_FM16),
        ("fm32", 3 | 2 << 3, K_FM32),
        ("sparse", 3 | 5 << 3, K_SPARSE),
        ("ternary_2bit", 1 | 4 << 3, K_TERNARY),
        ("ternary_base3", 1 | 4 | 4 << 3, K_TERNARY),
        ("ggml", 2 | 6 << 3, K_GGML),
    ] {
        let (ctx, base) = fuzz_setup(sel);
        let mut tuned = base.clone();
        for (i, t) in tuned.iter_mut().enumerate() {
            if i % 7 == 3 {
                *t = match ctx {
                    Ctx::Ternary {
                        layout: TernaryLayout::Bits2,
                        ..
                    } => *t ^ 0x01,
                    Ctx::Ternary { .. } => 128,
                    _ => t.wrapping_add(1),
                };
            }
        }
        if let Some(d) = encode_chunk(kind, ctx, &base, &tuned) {
            let mut out = vec![0u8; base.len()];
            if decode_chunk(kind, ctx, &d, &base, &mut out).is_ok() && out == tuned {
                let mut v = vec![0u8, sel];
                v.extend_from_slice(&d);
                seeds.push((format!("seed_chunk_{name}.bin"), v));
            }
        }
    }
    seeds
}

#[doc(hidden)]
/// For hostile-input tests and fuzz seeds: the delta `bytes` with its index edited by `edit` and
/// every checksum and offset resealed, as a writer that lies would make it (the payloads are
/// kept as they are).
pub fn reseal_index(bytes: &[u8], edit: impl FnOnce(&mut Index)) -> Result<Vec<u8>> {
    let d = DeltaFile::from_bytes(bytes.to_vec())?;
    let b = d.bytes();
    let mut index = d.index.clone();
    let payload = |x: &Blob| -> Result<Vec<u8>> {
        b.get(usize_of(x.offset)?..usize_of(x.offset.saturating_add(x.size))?)
            .map(<[u8]>::to_vec)
            .ok_or_else(|| malformed("blob out of range"))
    };
    let mut payloads = vec![payload(&index.prefix)?, payload(&index.suffix)?];
    for r in &index.tensors {
        payloads.push(payload(&r.payload)?);
    }
    edit(&mut index);
    write_delta(d.base_id(), index, &payloads)
}
