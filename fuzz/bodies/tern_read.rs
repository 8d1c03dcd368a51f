// The body of fuzz target `tern_read`, shared by fuzz/fuzz_targets/tern_read.rs (via include!) and the
// stable corpus replay in tests/tests/fuzz_regressions.rs, so the two cannot drift apart.
use tern_format::container::checksum;
use tern_format::TernFile;

pub fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(at..at + 8)?.try_into().ok()?))
}

/// Recompute every checksum a mutation may have broken (not the tensors', which live in the
/// directory JSON), and the header's file size.
pub fn fix_checksums(data: &[u8]) -> Option<Vec<u8>> {
    let mut b = data.to_vec();
    if b.len() < 64 {
        return None;
    }
    let len = b.len() as u64;
    b[48..56].copy_from_slice(&len.to_le_bytes());
    let t0 = u64_at(&b, 32)?;
    let n = u64::from(u32::from_le_bytes(b[40..44].try_into().ok()?));
    let body = n.checked_mul(32).filter(|&x| x <= len)?;
    let t1 = t0.checked_add(body).filter(|&x| x.checked_add(8).is_some_and(|e| e <= len))?;
    let (t0, t1) = (usize::try_from(t0).ok()?, usize::try_from(t1).ok()?);
    for e in (t0..t1).step_by(32) {
        let kind = u32::from_le_bytes(b[e..e + 4].try_into().ok()?);
        let (off, size) = (u64_at(&b, e + 8)?, u64_at(&b, e + 16)?);
        let end = off.checked_add(size).filter(|&x| x <= len);
        if kind != 3 {
            if let Some(end) = end {
                let h = checksum(&b[off as usize..end as usize]);
                b[e + 24..e + 32].copy_from_slice(&h.to_le_bytes());
            }
        }
    }
    let h = checksum(&b[t0..t1]);
    b[t1..t1 + 8].copy_from_slice(&h.to_le_bytes());
    let h = checksum(&b[0..56]);
    b[56..64].copy_from_slice(&h.to_le_bytes());
    Some(b)
}

/// Whether the file opened (the stable mutation test counts them).
pub fn exercise(bytes: Vec<u8>) -> bool {
    let Ok(f) = TernFile::from_bytes(bytes) else {
        return false;
    };
    let _ = (f.header(), f.sections(), f.meta());
    let data = f.data_offset();
    for (i, t) in f.tensors().iter().enumerate() {
        let _ = (t.n_elements(), t.bits_per_weight(), t.encoding.name());
        if let Ok(v) = f.tensor_at(i) {
            let _ = v.to_f32();
        }
        // The reader promised the range is inside the file: index without checks.
        let start = (data + t.offset) as usize;
        let raw = &f.file_bytes()[start..start + t.size as usize];
        let _ = t.encoding.decode_f32(&t.shape, raw);
    }
    if f.verify().is_ok() {
        for i in 0..f.tensors().len() {
            let v = f.tensor_at(i).expect("tensor of a verified file");
            let vals = v.to_f32().expect("decode a tensor of a verified file");
            assert_eq!(vals.len() as u64, v.info.n_elements());
        }
    }
    true
}

/// One fuzz input.
pub fn run(data: &[u8]) {
    exercise(data.to_vec());
    if let Some(fixed) = fix_checksums(data) {
        exercise(fixed);
    }
}
