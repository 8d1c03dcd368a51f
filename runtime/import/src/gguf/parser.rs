//! The hostile-input GGUF parser: every count bounded by the bytes left, every offset checked.

use super::*;

// ------------------------------------------------------------------------------------------------
// the parser

pub(super) struct Parsed {
    pub(super) version: u32,
    pub(super) kv: Vec<(String, GgufValue)>,
    pub(super) index: HashMap<String, usize>,
    pub(super) tensors: Vec<GgufTensorInfo>,
    pub(super) tensor_index: HashMap<String, usize>,
    pub(super) alignment: u64,
    pub(super) data_offset: u64,
    pub(super) architecture: String,
}

/// llama.cpp's `GGUF_MAX_ARRAY_ELEMENTS`: larger arrays are rejected outright.
pub(super) const MAX_ARRAY_ELEMENTS: u64 = 1 << 30;

pub(super) struct Parser<'a> {
    pub(super) buf: &'a [u8],
    pub(super) pos: usize,
}

impl<'a> Parser<'a> {
    fn remaining(&self) -> usize {
        self.buf.len().saturating_sub(self.pos)
    }

    fn take(&mut self, n: usize, what: &dyn Fn() -> String) -> Result<&'a [u8]> {
        let end = self.pos.checked_add(n).filter(|&e| e <= self.buf.len());
        match end.and_then(|e| self.buf.get(self.pos..e).map(|s| (e, s))) {
            Some((e, s)) => {
                self.pos = e;
                Ok(s)
            }
            None => Err(gguf_err(format!(
                "truncated at {}: needs {n} bytes at offset {}, the file has {}",
                what(),
                self.pos,
                self.buf.len()
            ))),
        }
    }

    fn array<const N: usize>(&mut self, what: &dyn Fn() -> String) -> Result<[u8; N]> {
        let s = self.take(N, what)?;
        let mut a = [0u8; N];
        a.copy_from_slice(s); // ok: take returned exactly N bytes
        Ok(a)
    }
    fn u32(&mut self, what: &dyn Fn() -> String) -> Result<u32> {
        Ok(u32::from_le_bytes(self.array(what)?))
    }
    fn u64(&mut self, what: &dyn Fn() -> String) -> Result<u64> {
        Ok(u64::from_le_bytes(self.array(what)?))
    }

    /// Checks that `count` elements of at least `min_size` bytes each can still be in the file, so
    /// that a capacity of `count` is bounded by the file size.
    fn check_count(&self, count: u64, min_size: u64, what: &dyn Fn() -> String) -> Result<usize> {
        let need = count.checked_mul(min_size);
        match need {
            Some(need) if need <= self.remaining() as u64 => Ok(count as usize), // ok: ≤ remaining
            _ => Err(gguf_err(format!(
                "{} count {count} cannot fit in the {} bytes left in the file (each needs at least {min_size})",
                what(),
                self.remaining()
            ))),
        }
    }

    fn string(&mut self, what: &dyn Fn() -> String) -> Result<String> {
        let bytes = self.string_bytes(what)?;
        Ok(match std::str::from_utf8(bytes) {
            Ok(s) => s.to_string(),
            Err(e) => {
                log::warn!(
                    "GGUF {} is not valid UTF-8 ({e}); invalid bytes replaced by U+FFFD",
                    what()
                );
                String::from_utf8_lossy(bytes).into_owned()
            }
        })
    }

    fn string_bytes(&mut self, what: &dyn Fn() -> String) -> Result<&'a [u8]> {
        let len = self.u64(&|| format!("{} (length)", what()))?;
        if len > self.remaining() as u64 {
            return Err(gguf_err(format!(
                "truncated at {}: string length {len} exceeds the {} bytes left in the file",
                what(),
                self.remaining()
            )));
        }
        self.take(len as usize, &|| format!("{} (bytes)", what())) // ok: len ≤ remaining
    }

    fn scalar(&mut self, ty: u32, what: &dyn Fn() -> String) -> Result<GgufValue> {
        use value_type as vt;
        Ok(match ty {
            vt::U8 => GgufValue::U8(self.array::<1>(what)?[0]),
            vt::I8 => GgufValue::I8(self.array::<1>(what)?[0] as i8),
            vt::U16 => GgufValue::U16(u16::from_le_bytes(self.array(what)?)),
            vt::I16 => GgufValue::I16(i16::from_le_bytes(self.array(what)?)),
            vt::U32 => GgufValue::U32(u32::from_le_bytes(self.array(what)?)),
            vt::I32 => GgufValue::I32(i32::from_le_bytes(self.array(what)?)),
            vt::F32 => GgufValue::F32(f32::from_le_bytes(self.array(what)?)),
            vt::U64 => GgufValue::U64(u64::from_le_bytes(self.array(what)?)),
            vt::I64 => GgufValue::I64(i64::from_le_bytes(self.array(what)?)),
            vt::F64 => GgufValue::F64(f64::from_le_bytes(self.array(what)?)),
            vt::BOOL => GgufValue::Bool(self.bool(what)?),
            vt::STRING => GgufValue::String(self.string(what)?),
            vt::ARRAY => {
                return Err(gguf_err(format!(
                    "{}: arrays of arrays are not supported (llama.cpp rejects them too)",
                    what()
                )))
            }
            other => return Err(gguf_err(format!("{}: invalid value type {other}", what()))),
        })
    }

    fn bool(&mut self, what: &dyn Fn() -> String) -> Result<bool> {
        match self.array::<1>(what)?[0] {
            0 => Ok(false),
            1 => Ok(true),
            b => Err(gguf_err(format!(
                "{}: bool byte is {b}, not 0 or 1",
                what()
            ))),
        }
    }

    fn fixed_array<T, const N: usize>(
        &mut self,
        n: usize,
        conv: fn([u8; N]) -> T,
        what: &dyn Fn() -> String,
    ) -> Result<Vec<T>> {
        let bytes = self.take(n.saturating_mul(N), what)?;
        Ok(bytes
            .chunks_exact(N)
            .map(|c| {
                let mut a = [0u8; N];
                a.copy_from_slice(c); // ok: chunks_exact yields N bytes
                conv(a)
            })
            .collect())
    }

    fn array_value(&mut self, what: &dyn Fn() -> String) -> Result<GgufArray> {
        use value_type as vt;
        let ty = self.u32(&|| format!("{} (array element type)", what()))?;
        let count = self.u64(&|| format!("{} (array length)", what()))?;
        if count > MAX_ARRAY_ELEMENTS {
            return Err(gguf_err(format!(
                "{}: array length {count} exceeds the limit of {MAX_ARRAY_ELEMENTS}",
                what()
            )));
        }
        let min_size = match ty {
            vt::U8 | vt::I8 | vt::BOOL => 1,
            vt::U16 | vt::I16 => 2,
            vt::U32 | vt::I32 | vt::F32 => 4,
            vt::U64 | vt::I64 | vt::F64 | vt::STRING => 8,
            vt::ARRAY => {
                return Err(gguf_err(format!(
                    "{}: arrays of arrays are not supported (llama.cpp rejects them too)",
                    what()
                )))
            }
            other => {
                return Err(gguf_err(format!(
                    "{}: invalid array element type {other}",
                    what()
                )))
            }
        };
        let n = self.check_count(count, min_size, &|| format!("{} array", what()))?;
        let elems = &|| format!("{} (array of {count} {})", what(), value_type_name(ty));
        Ok(match ty {
            vt::U8 => GgufArray::U8(self.take(n, elems)?.to_vec()),
            vt::I8 => GgufArray::I8(self.take(n, elems)?.iter().map(|&b| b as i8).collect()),
            vt::BOOL => {
                let bytes = self.take(n, elems)?;
                let mut v = Vec::with_capacity(n);
                for (i, &b) in bytes.iter().enumerate() {
                    match b {
                        0 => v.push(false),
                        1 => v.push(true),
                        b => {
                            return Err(gguf_err(format!(
                                "{}[{i}]: bool byte is {b}, not 0 or 1",
                                what()
                            )))
                        }
                    }
                }
                GgufArray::Bool(v)
            }
            vt::U16 => GgufArray::U16(self.fixed_array(n, u16::from_le_bytes, elems)?),
            vt::I16 => GgufArray::I16(self.fixed_array(n, i16::from_le_bytes, elems)?),
            vt::U32 => GgufArray::U32(self.fixed_array(n, u32::from_le_bytes, elems)?),
            vt::I32 => GgufArray::I32(self.fixed_array(n, i32::from_le_bytes, elems)?),
            vt::F32 => GgufArray::F32(self.fixed_array(n, f32::from_le_bytes, elems)?),
            vt::U64 => GgufArray::U64(self.fixed_array(n, u64::from_le_bytes, elems)?),
            vt::I64 => GgufArray::I64(self.fixed_array(n, i64::from_le_bytes, elems)?),
            vt::F64 => GgufArray::F64(self.fixed_array(n, f64::from_le_bytes, elems)?),
            _ => {
                // strings (the only type left after the min_size match)
                let mut v = Vec::with_capacity(n);
                for i in 0..n {
                    v.push(self.string(&|| format!("{}[{i}]", what()))?);
                }
                GgufArray::String(v)
            }
        })
    }

    pub(super) fn parse(mut self) -> Result<Parsed> {
        // 1. magic
        let magic: [u8; 4] = self.array(&|| "magic".into())?;
        if magic != GGUF_MAGIC {
            return Err(gguf_err(format!(
                "bad magic bytes {:02x?} (expected \"GGUF\" = 47 47 55 46): not a GGUF file",
                magic
            )));
        }
        // 2. version
        let version = self.u32(&|| "version".into())?;
        if version != 0 && version & 0xFFFF == 0 {
            return Err(gguf_err(format!(
                "version field is {version:#010x}: this is a big-endian (byte-swapped) GGUF file; tern reads little-endian GGUF only"
            )));
        }
        match version {
            2 | 3 => {}
            1 => {
                return Err(gguf_err(
                    "GGUF v1 is not supported (re-convert the model with a current llama.cpp)",
                ))
            }
            v => {
                return Err(gguf_err(format!(
                    "unsupported GGUF version {v} (tern reads v2 and v3)"
                )))
            }
        }
        // 3. counts
        let n_tensors = self.u64(&|| "header (tensor count)".into())?;
        let n_kv = self.u64(&|| "header (key/value count)".into())?;
        if n_tensors > i64::MAX as u64 || n_kv > i64::MAX as u64 {
            return Err(gguf_err(format!(
                "header counts out of range: {n_tensors} tensors, {n_kv} key/value pairs"
            )));
        }
        // A KV pair needs ≥ 8 (key length) + 1 (key) + 4 (type) + 1 bytes; a tensor info needs
        // ≥ 8 (name length) + 4 (n_dims) + 4 (type) + 8 (offset) bytes.
        let n_kv = self.check_count(n_kv, 14, &|| "key/value".into())?;
        let n_tensors_cap = self.check_count(n_tensors, 24, &|| "tensor".into())?;

        // 4. key/value pairs
        let mut kv: Vec<(String, GgufValue)> = Vec::with_capacity(n_kv);
        let mut index = HashMap::with_capacity(n_kv);
        for i in 0..n_kv {
            let key_bytes = self.string_bytes(&|| format!("key/value {i} (key)"))?;
            let key = std::str::from_utf8(key_bytes)
                .map_err(|e| gguf_err(format!("key/value {i}: key is not valid UTF-8 ({e})")))?
                .to_string();
            if key.is_empty() {
                return Err(gguf_err(format!("key/value {i}: empty key")));
            }
            if index.contains_key(&key) {
                return Err(gguf_err(format!("key/value {i}: duplicate key {key:?}")));
            }
            let what = || format!("key/value {i} ({key:?})");
            let ty = self.u32(&|| format!("{} (type)", what()))?;
            let value = if ty == value_type::ARRAY {
                GgufValue::Array(self.array_value(&what)?)
            } else {
                self.scalar(ty, &what)?
            };
            index.insert(key.clone(), kv.len());
            kv.push((key, value));
        }
        let lookup = |k: &str| {
            index
                .get(k)
                .and_then(|&i: &usize| kv.get(i))
                .map(|(_, v)| v)
        };

        let architecture = match lookup("general.architecture") {
            None => String::new(),
            Some(GgufValue::String(s)) => s.clone(),
            Some(v) => {
                return Err(gguf_err(format!(
                    "general.architecture is {}, expected a string",
                    v.type_name()
                )))
            }
        };
        let alignment = match lookup("general.alignment") {
            None => DEFAULT_ALIGNMENT,
            Some(v) => match v.as_i128() {
                Some(a) if a > 0 && a <= u32::MAX as i128 && (a as u64).is_power_of_two() => {
                    a as u64
                }
                _ => {
                    return Err(gguf_err(format!(
                        "general.alignment = {v} is not a power of two in u32 range"
                    )))
                }
            },
        };

        // 5. tensor infos
        let mut tensors: Vec<GgufTensorInfo> = Vec::with_capacity(n_tensors_cap);
        let mut tensor_index = HashMap::with_capacity(n_tensors_cap);
        for i in 0..n_tensors_cap {
            let name = self.string(&|| format!("tensor info {i} (name)"))?;
            if tensor_index.contains_key(&name) {
                return Err(gguf_err(format!(
                    "tensor info {i}: duplicate tensor name {name:?}"
                )));
            }
            let what = |field: &str| format!("tensor info {i} ({name:?}, {field})");
            let n_dims = self.u32(&|| what("n_dims"))?;
            if n_dims as usize > MAX_DIMS {
                return Err(gguf_err(format!(
                    "{}: {n_dims} dimensions, at most {MAX_DIMS}",
                    what("n_dims")
                )));
            }
            let mut ne = Vec::with_capacity(n_dims as usize);
            for d in 0..n_dims {
                let x = self.u64(&|| what(&format!("ne[{d}]")))?;
                if x > i64::MAX as u64 {
                    return Err(gguf_err(format!(
                        "{}: dimension {x} is negative as i64",
                        what(&format!("ne[{d}]"))
                    )));
                }
                ne.push(x);
            }
            let n_elems = ne.iter().try_fold(1u64, |a, &d| a.checked_mul(d));
            if n_elems.is_none_or(|n| n > i64::MAX as u64) {
                return Err(gguf_err(format!(
                    "{}: element count of ne = {ne:?} overflows i64",
                    what("ne")
                )));
            }
            let type_id = self.u32(&|| what("type"))?;
            let offset = self.u64(&|| what("offset"))?;
            let ggml_type = GgmlType::from_id(type_id, &architecture);
            let size = ggml_type.byte_size(&ne).map_err(|e| {
                gguf_err(format!(
                    "tensor {name:?} of type {ggml_type} with ne = {ne:?}: {e}"
                ))
            })?;
            if offset % alignment != 0 {
                return Err(gguf_err(format!(
                    "tensor {name:?}: offset {offset} is not a multiple of the alignment {alignment}"
                )));
            }
            tensor_index.insert(name.clone(), tensors.len());
            tensors.push(GgufTensorInfo {
                name,
                ne,
                type_id,
                ggml_type,
                offset,
                size,
            });
        }

        // 6. data section
        let header_end = self.pos as u64;
        let data_offset = if tensors.is_empty() {
            header_end
        } else {
            header_end.div_ceil(alignment).saturating_mul(alignment)
        };
        let file_len = self.buf.len() as u64;
        if !tensors.is_empty() && data_offset > file_len {
            return Err(gguf_err(format!(
                "truncated before the data section: it starts at {data_offset}, the file has {file_len} bytes"
            )));
        }
        let data_len = file_len.saturating_sub(data_offset);

        // Every tensor inside the data section, no two overlapping.
        let mut order: Vec<usize> = (0..tensors.len()).collect();
        order.sort_by_key(|&i| tensors.get(i).map(|t| t.offset));
        let mut prev: Option<(&str, u64)> = None; // (name, end) of the previous tensor of known size
        for &i in &order {
            let Some(t) = tensors.get(i) else { continue };
            if t.offset > data_len {
                return Err(gguf_err(format!(
                    "tensor {:?}: offset {} is past the end of the data section ({data_len} bytes; file truncated?)",
                    t.name, t.offset
                )));
            }
            if let Some((pname, pend)) = prev {
                if t.offset < pend {
                    return Err(gguf_err(format!(
                        "tensor {:?} at data offset {} overlaps tensor {pname:?}, which ends at {pend}",
                        t.name, t.offset
                    )));
                }
            }
            if let Some(size) = t.size {
                let end = t.offset.checked_add(size).filter(|&e| e <= data_len).ok_or_else(|| {
                    gguf_err(format!(
                        "tensor {:?}: bytes {}..{} (+{size}) run past the end of the data section ({data_len} bytes; file truncated?)",
                        t.name,
                        t.offset,
                        t.offset.saturating_add(size),
                    ))
                })?;
                prev = Some((t.name.as_str(), end));
            }
        }

        Ok(Parsed {
            version,
            kv,
            index,
            tensors,
            tensor_index,
            alignment,
            data_offset,
            architecture,
        })
    }
}
