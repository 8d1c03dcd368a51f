//! Safetensors shards: finding, mapping and converting their tensors.

use super::*;

// ------------------------------------------------------------------------------------------------
// Shards

/// The safetensors files of a model, in a stable order.
pub(super) fn shard_files(dir: &Path) -> Result<Vec<PathBuf>> {
    let index = dir.join("model.safetensors.index.json");
    if index.is_file() {
        let v = read_json(&index)?;
        let map = v
            .get("weight_map")
            .and_then(Value::as_object)
            .ok_or_else(|| hf_err("model.safetensors.index.json: no `weight_map` object"))?;
        let mut files = BTreeSet::new();
        for (tensor, f) in map {
            let f = f.as_str().ok_or_else(|| {
                hf_err(format!(
                    "model.safetensors.index.json: file of {tensor:?} is not a string"
                ))
            })?;
            let plain = !f.is_empty() && f != "." && f != ".." && !f.contains(['/', '\\']);
            if !plain {
                return Err(hf_err(format!(
                    "model.safetensors.index.json: shard {f:?} is not a plain file name"
                )));
            }
            files.insert(f.to_string());
        }
        if files.is_empty() {
            return Err(hf_err(
                "model.safetensors.index.json: `weight_map` is empty",
            ));
        }
        return Ok(files.into_iter().map(|f| dir.join(f)).collect());
    }
    let single = dir.join("model.safetensors");
    if single.is_file() {
        return Ok(vec![single]);
    }
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_file() && p.extension().is_some_and(|x| x == "safetensors"))
        .collect();
    files.sort();
    if files.is_empty() {
        return Err(hf_err(format!(
            "no *.safetensors file in {}",
            dir.display()
        )));
    }
    Ok(files)
}

pub(super) fn map_file(path: &Path) -> Result<memmap2::Mmap> {
    let f = File::open(path).map_err(|e| hf_err(format!("opening {}: {e}", path.display())))?;
    // SAFETY: read-only mapping of a file tern does not write; if another process truncates it
    // meanwhile, reads fault (the usual mmap caveat, as for every mmap-based loader).
    Ok(unsafe { memmap2::Mmap::map(&f)? })
}

pub(super) fn float_type(d: Dtype) -> Option<FloatType> {
    match d {
        Dtype::F32 => Some(FloatType::F32),
        Dtype::F16 => Some(FloatType::F16),
        Dtype::BF16 => Some(FloatType::Bf16),
        _ => None,
    }
}

pub(super) fn to_f32(dt: FloatType, raw: &[u8]) -> Vec<f32> {
    match dt {
        FloatType::F32 => raw
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect(),
        FloatType::F16 => raw
            .chunks_exact(2)
            .map(|c| half::f16::from_le_bytes([c[0], c[1]]).to_f32())
            .collect(),
        FloatType::Bf16 => raw
            .chunks_exact(2)
            .map(|c| half::bf16::from_le_bytes([c[0], c[1]]).to_f32())
            .collect(),
    }
}

pub(super) fn shape_u64(s: &[usize]) -> Vec<u64> {
    s.iter().map(|&d| d as u64).collect()
}

/// Unpack transformers' packed BitNet weight `name` (`[rows/4, cols]` uint8, four contiguous row
/// chunks, chunk `i` at bits `2i..2i+2`, code = trit + 1) into `rows × cols` trits.
pub(super) fn unpack_bitnet_weight(
    name: &str,
    packed: &[u8],
    rows: usize,
    cols: usize,
) -> Result<Vec<i8>> {
    if rows % 4 != 0 {
        return Err(hf_err(format!(
            "{name}: packed BitNet weight with {rows} rows (not a multiple of 4)"
        )));
    }
    let p = rows / 4;
    if p.checked_mul(cols) != Some(packed.len()) {
        return Err(hf_err(format!(
            "{name}: {} bytes for packed shape [{p}, {cols}]",
            packed.len()
        )));
    }
    let mut trits = vec![0i8; packed.len() * 4];
    for (i, chunk) in trits
        .chunks_exact_mut(packed.len().max(1))
        .enumerate()
        .take(4)
    {
        for (t, &b) in chunk.iter_mut().zip(packed) {
            let code = (b >> (2 * i)) & 3;
            if code == 3 {
                return Err(hf_err(format!(
                    "{name}: packed 2-bit code 3 (only 0, 1, 2 encode -1, 0, +1)"
                )));
            }
            *t = code as i8 - 1;
        }
    }
    Ok(trits)
}

/// Read a one-element `weight_scale` tensor.
pub(super) fn read_scale(name: &str, dtype: Dtype, shape: &[usize], raw: &[u8]) -> Result<f32> {
    let n: usize = shape.iter().product();
    let dt = float_type(dtype).filter(|_| n == 1).ok_or_else(|| {
        hf_err(format!(
            "{name}: expected one bf16/f16/f32 value, found {dtype:?} of shape {shape:?}"
        ))
    })?;
    let v = to_f32(dt, raw)
        .first()
        .copied()
        .ok_or_else(|| hf_err(format!("{name}: no data")))?;
    if !v.is_finite() || v == 0.0 {
        return Err(hf_err(format!(
            "{name}: scale {v} must be finite and non-zero"
        )));
    }
    Ok(v)
}
