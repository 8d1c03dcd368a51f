// The body of fuzz target `delta_apply`, shared by fuzz/fuzz_targets/delta_apply.rs (via include!)
// and the stable corpus replay in tests/tests/fuzz_regressions.rs.
//
// The input is a `.ternd` delta applied to a real base (fuzz/regressions/model_load/valid.tern):
// open, base identity and base-tensor checks, every declared size against the base and the
// stream, the image allocated, every tensor decoded and checked. A lie about a size must be a
// typed error before anything is allocated for it (issue 29: a resealed NeuZip size asked for
// 16 TiB). A first byte < 0x40 reseals the rest's index with edits (structure-aware: sizes
// inflated, offsets moved) so the lies pass the checksums; otherwise the rest is the raw file.

fn base() -> Option<&'static tern_format::TernFile> {
    static BASE: std::sync::OnceLock<Option<tern_format::TernFile>> = std::sync::OnceLock::new();
    BASE.get_or_init(|| {
        let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../fuzz/regressions/model_load/valid.tern");
        tern_format::TernFile::open(&p).ok()
    })
    .as_ref()
}

/// The delta bytes `data` describes (`seed` is a valid delta against the base, for the edits).
pub fn delta_bytes(data: &[u8], seed: &[u8]) -> Vec<u8> {
    match data.split_first() {
        Some((&b, rest)) if b < 0x40 => {
            let edited = tern_format::delta::reseal_index(seed, |idx| {
                let n = idx.tensors.len().max(1);
                for (i, e) in rest.chunks(3).enumerate() {
                    let big = 1u64 << (e.get(1).copied().unwrap_or(0) % 64);
                    let which = usize::from(e[0]);
                    match e.get(2).copied().unwrap_or(0) % 5 {
                        0 => {
                            if let Some(r) = idx.tensors.get_mut(which % n) {
                                r.info.size = r.info.size.wrapping_add(big);
                            }
                        }
                        1 => idx.data_size = idx.data_size.wrapping_add(big),
                        2 => idx.tuned_size = idx.tuned_size.wrapping_add(big),
                        3 => {
                            if let Some(r) = idx.tensors.get_mut(which % n) {
                                r.info.offset = r.info.offset.wrapping_add(big);
                            }
                        }
                        _ => {
                            if let Some(r) = idx.tensors.get_mut(i % n) {
                                r.info.shape.iter_mut().for_each(|d| *d = d.wrapping_mul(big));
                            }
                        }
                    }
                }
            });
            edited.unwrap_or_default()
        }
        Some((_, rest)) => rest.to_vec(),
        None => Vec::new(),
    }
}

/// A delta from the base to a copy whose tensors all changed (the seed for the edits).
pub fn seed_delta() -> Vec<u8> {
    static SEED: std::sync::OnceLock<Vec<u8>> = std::sync::OnceLock::new();
    SEED.get_or_init(|| {
        let Some(b) = base() else { return Vec::new() };
        let p = std::env::temp_dir().join(format!("tern-fuzz-delta-{}.tern", std::process::id()));
        let ok = (|| -> Option<()> {
            let mut w = tern_format::TernWriter::create(&p, b.meta().clone()).ok()?;
            for i in 0..b.tensors().len() {
                let v = b.tensor_at(i).ok()?;
                let mut bytes = v.bytes.to_vec();
                if let Some(x) = bytes.get_mut(0) {
                    *x ^= 1;
                }
                w.add_tensor(&v.info.name, &v.info.shape, v.info.encoding.clone(), &bytes)
                    .ok()?;
            }
            w.finish().ok()?;
            Some(())
        })();
        let out = ok
            .and_then(|()| tern_format::TernFile::open(&p).ok())
            .and_then(|t| tern_format::delta::create(b, &t, 1).ok())
            .map(|(bytes, _)| bytes)
            .unwrap_or_default();
        let _ = std::fs::remove_file(&p);
        out
    })
    .clone()
}

/// Apply the delta `data` describes to the base; errors are fine.
pub fn run(data: &[u8]) {
    let Some(b) = base() else { return };
    let bytes = delta_bytes(data, &seed_delta());
    if let Ok(d) = tern_format::delta::DeltaFile::from_bytes(bytes) {
        let _ = d.apply_with(b, 1);
    }
}
