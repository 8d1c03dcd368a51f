//! The `.tern` container: streaming writer, validating mmap reader, full verification.
//! The byte layout is specified in the crate documentation (`lib.rs`).

use std::collections::HashSet;
use std::fs::File;
use std::io::{BufWriter, Seek, SeekFrom, Write};
use std::path::Path;
use std::sync::OnceLock;

use serde::{Deserialize, Serialize};
use xxhash_rust::xxh3::{xxh3_64, Xxh3};

use crate::encoding::{element_count, Encoding};
use crate::error::{FormatError, Result};
use crate::meta::ModelMeta;

/// Magic bytes: "TERN", then NUL, CR LF, ^Z (catches text-mode and truncating transfers, like PNG).
pub const MAGIC: [u8; 8] = *b"TERN\0\r\n\x1a";
/// The format version this build reads and writes.
pub const VERSION: u32 = 1;
/// Size of the fixed header.
pub const HEADER_SIZE: usize = 64;
/// Offset of the data section (one page, so the data can be mapped page-aligned).
pub const DATA_OFFSET: u64 = 4096;
/// Alignment of every tensor's first byte (≥ GPU `minStorageBufferOffsetAlignment`, 256 on all
/// adapters we target, and a multiple of every element and block size).
pub const TENSOR_ALIGN: u64 = 256;
/// Alignment of the metadata, directory and section-table sections.
pub const SECTION_ALIGN: u64 = 8;
/// Size of one section-table entry.
pub const SECTION_ENTRY_SIZE: usize = 32;

/// Section kinds.
pub const SECTION_METADATA: u32 = 1;
pub const SECTION_DIRECTORY: u32 = 2;
pub const SECTION_DATA: u32 = 3;
/// Section flag: a reader that does not know this section kind must refuse the file.
pub const SECTION_REQUIRED: u32 = 1;

/// Every required-feature bit this build understands.
pub const KNOWN_FEATURES: u64 =
    crate::FEATURE_NEUZIP | crate::FEATURE_TERNARY_2BIT | crate::FEATURE_TERNARY_BASE3;

/// One entry of the tensor directory.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TensorInfo {
    pub name: String,
    /// Outermost dimension first (PyTorch order): a linear weight is `[out_features, in_features]`.
    pub shape: Vec<u64>,
    pub encoding: Encoding,
    /// Offset of the first byte, relative to the start of the data section.
    pub offset: u64,
    /// Number of bytes.
    pub size: u64,
    /// xxh3-64 of the tensor's bytes.
    pub checksum: u64,
}

impl TensorInfo {
    pub fn n_elements(&self) -> u64 {
        element_count(&self.shape).unwrap_or(0)
    }
    /// Bits per weight of the stored encoding (bytes × 8 / elements).
    pub fn bits_per_weight(&self) -> f64 {
        let n = self.n_elements();
        if n == 0 {
            0.0
        } else {
            self.size as f64 * 8.0 / n as f64
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Directory {
    tensors: Vec<TensorInfo>,
}

/// A section-table entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Section {
    pub kind: u32,
    pub flags: u32,
    pub offset: u64,
    pub size: u64,
    /// xxh3-64 of the section bytes (0 for the data section, which per-tensor checksums cover).
    pub checksum: u64,
}

/// The fixed header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    pub version: u32,
    pub required_features: u64,
    pub optional_features: u64,
    pub section_table_offset: u64,
    pub section_count: u32,
    pub file_size: u64,
}

impl Header {
    fn to_bytes(self) -> [u8; HEADER_SIZE] {
        let mut b = [0u8; HEADER_SIZE];
        b[0..8].copy_from_slice(&MAGIC);
        b[8..12].copy_from_slice(&self.version.to_le_bytes());
        b[12..16].copy_from_slice(&(HEADER_SIZE as u32).to_le_bytes());
        b[16..24].copy_from_slice(&self.required_features.to_le_bytes());
        b[24..32].copy_from_slice(&self.optional_features.to_le_bytes());
        b[32..40].copy_from_slice(&self.section_table_offset.to_le_bytes());
        b[40..44].copy_from_slice(&self.section_count.to_le_bytes());
        b[48..56].copy_from_slice(&self.file_size.to_le_bytes());
        let h = xxh3_64(&b[0..56]);
        b[56..64].copy_from_slice(&h.to_le_bytes());
        b
    }
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[at..at + 4]);
    u32::from_le_bytes(a)
}
fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(a)
}

fn pad_to(x: u64, a: u64) -> u64 {
    x.div_ceil(a) * a
}

// ------------------------------------------------------------------------------------------------
// Writer

/// Streaming `.tern` writer: tensor bytes go to disk as they are added; only the directory is kept
/// in memory. Call [`TernWriter::finish`] to write metadata, directory, section table and header.
pub struct TernWriter {
    out: BufWriter<File>,
    meta: ModelMeta,
    tensors: Vec<TensorInfo>,
    names: HashSet<String>,
    /// Bytes written into the data section so far (relative to DATA_OFFSET).
    data_len: u64,
    features: u64,
}

impl TernWriter {
    /// Create `path` (truncating it) for a model described by `meta`.
    pub fn create(path: &Path, meta: ModelMeta) -> Result<Self> {
        let file = File::create(path)?;
        let mut out = BufWriter::with_capacity(1 << 20, file);
        out.write_all(&[0u8; DATA_OFFSET as usize])?;
        Ok(Self {
            out,
            meta,
            tensors: Vec::new(),
            names: HashSet::new(),
            data_len: 0,
            features: 0,
        })
    }

    /// Append one tensor. `shape` is outermost-first; `bytes` must be exactly what `encoding`
    /// requires for that shape.
    pub fn add_tensor(
        &mut self,
        name: &str,
        shape: &[u64],
        encoding: Encoding,
        bytes: &[u8],
    ) -> Result<()> {
        if name.is_empty() || name.len() > 1024 {
            return Err(FormatError::InvalidArgument(format!(
                "bad tensor name {name:?}"
            )));
        }
        if !self.names.insert(name.to_string()) {
            return Err(FormatError::DuplicateTensor(name.to_string()));
        }
        if let Some(expect) = encoding.expected_bytes(shape)? {
            if expect != bytes.len() as u64 {
                return Err(FormatError::InvalidArgument(format!(
                    "tensor {name:?}: {} needs {expect} bytes for shape {shape:?}, got {}",
                    encoding.name(),
                    bytes.len()
                )));
            }
        }
        let start = pad_to(self.data_len, TENSOR_ALIGN);
        self.write_zeros(start - self.data_len)?;
        self.out.write_all(bytes)?;
        self.data_len = start + bytes.len() as u64;
        self.features |= encoding.required_feature();
        self.tensors.push(TensorInfo {
            name: name.to_string(),
            shape: shape.to_vec(),
            encoding,
            offset: start,
            size: bytes.len() as u64,
            checksum: xxh3_64(bytes),
        });
        Ok(())
    }

    /// Number of tensors added so far.
    pub fn len(&self) -> usize {
        self.tensors.len()
    }

    pub fn is_empty(&self) -> bool {
        self.tensors.is_empty()
    }

    fn write_zeros(&mut self, n: u64) -> Result<()> {
        const Z: [u8; 4096] = [0; 4096];
        let mut left = n;
        while left > 0 {
            let k = left.min(Z.len() as u64) as usize;
            self.out.write_all(&Z[..k])?;
            left -= k as u64;
        }
        Ok(())
    }

    /// Write metadata, directory, section table and header; returns the file size.
    pub fn finish(mut self) -> Result<u64> {
        let meta = serde_json::to_vec(&self.meta)
            .map_err(|e| FormatError::InvalidArgument(format!("metadata: {e}")))?;
        let dir = serde_json::to_vec(&Directory {
            tensors: std::mem::take(&mut self.tensors),
        })
        .map_err(|e| FormatError::InvalidArgument(format!("directory: {e}")))?;
        let mut pos = DATA_OFFSET + self.data_len;
        let mut sections = vec![Section {
            kind: SECTION_DATA,
            flags: SECTION_REQUIRED,
            offset: DATA_OFFSET,
            size: self.data_len,
            checksum: 0,
        }];
        for (kind, bytes) in [(SECTION_METADATA, &meta), (SECTION_DIRECTORY, &dir)] {
            let start = pad_to(pos, SECTION_ALIGN);
            self.write_zeros(start - pos)?;
            self.out.write_all(bytes)?;
            sections.push(Section {
                kind,
                flags: SECTION_REQUIRED,
                offset: start,
                size: bytes.len() as u64,
                checksum: xxh3_64(bytes),
            });
            pos = start + bytes.len() as u64;
        }
        let table_at = pad_to(pos, SECTION_ALIGN);
        self.write_zeros(table_at - pos)?;
        let mut table = Vec::with_capacity(sections.len() * SECTION_ENTRY_SIZE + 8);
        for s in &sections {
            table.extend_from_slice(&s.kind.to_le_bytes());
            table.extend_from_slice(&s.flags.to_le_bytes());
            table.extend_from_slice(&s.offset.to_le_bytes());
            table.extend_from_slice(&s.size.to_le_bytes());
            table.extend_from_slice(&s.checksum.to_le_bytes());
        }
        let th = xxh3_64(&table);
        table.extend_from_slice(&th.to_le_bytes());
        self.out.write_all(&table)?;
        let file_size = table_at + table.len() as u64;
        let header = Header {
            version: VERSION,
            required_features: self.features,
            optional_features: 0,
            section_table_offset: table_at,
            section_count: sections.len() as u32,
            file_size,
        };
        self.out.seek(SeekFrom::Start(0))?;
        self.out.write_all(&header.to_bytes())?;
        self.out.flush()?;
        self.out.get_ref().sync_all()?;
        Ok(file_size)
    }
}

// ------------------------------------------------------------------------------------------------
// Reader

enum Backing {
    Mmap(memmap2::Mmap),
    Owned(Vec<u8>),
}

impl Backing {
    fn bytes(&self) -> &[u8] {
        match self {
            Backing::Mmap(m) => m,
            Backing::Owned(v) => v,
        }
    }
}

/// An open, validated `.tern` file. Every offset, size and shape was checked when it was opened;
/// tensor checksums are checked lazily on first access ([`TernFile::tensor`]) or all at once by
/// [`TernFile::verify`].
pub struct TernFile {
    data: Backing,
    header: Header,
    sections: Vec<Section>,
    meta: ModelMeta,
    tensors: Vec<TensorInfo>,
    checked: Vec<OnceLock<bool>>,
}

/// A tensor's directory entry and bytes (borrowed from the mapping).
#[derive(Clone, Copy)]
pub struct TensorView<'a> {
    pub info: &'a TensorInfo,
    pub bytes: &'a [u8],
}

impl TensorView<'_> {
    /// Decode the whole tensor to f32.
    pub fn to_f32(&self) -> Result<Vec<f32>> {
        self.info.encoding.decode_f32(&self.info.shape, self.bytes)
    }
}

impl std::fmt::Debug for TernFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TernFile")
            .field("header", &self.header)
            .field("tensors", &self.tensors.len())
            .finish()
    }
}

impl TernFile {
    /// Memory-map and validate `path`.
    pub fn open(path: &Path) -> Result<Self> {
        let file = File::open(path)?;
        // SAFETY: the mapping is read-only; tern never writes a file it has mapped. If another process
        // truncates it meanwhile, reads fault (the documented mmap caveat for every mmap-based loader).
        let map = unsafe { memmap2::Mmap::map(&file)? };
        Self::from_backing(Backing::Mmap(map))
    }

    /// Validate a `.tern` image held in memory.
    pub fn from_bytes(bytes: Vec<u8>) -> Result<Self> {
        Self::from_backing(Backing::Owned(bytes))
    }

    fn from_backing(data: Backing) -> Result<Self> {
        let b = data.bytes();
        let len = b.len() as u64;
        let trunc = |what: &str, start: u64, end: u64| FormatError::Truncated {
            what: what.into(),
            start,
            end,
            len,
        };
        if b.len() < 8 || b[0..8] != MAGIC {
            if b.len() >= 4 && &b[0..4] == b"GGUF" {
                return Err(FormatError::BadMagic {
                    remedy:
                        "this is a GGUF file: convert it with `tern pack FILE.gguf -o FILE.tern`",
                });
            }
            if b.len() < 8 && MAGIC.starts_with(b) {
                return Err(trunc("header", 0, HEADER_SIZE as u64));
            }
            return Err(FormatError::BadMagic {
                remedy: "expected a file written by `tern pack`",
            });
        }
        if b.len() < HEADER_SIZE {
            return Err(trunc("header", 0, HEADER_SIZE as u64));
        }
        let version = u32_at(b, 8);
        if version != VERSION {
            return Err(FormatError::UnsupportedVersion {
                found: version,
                supported: VERSION,
            });
        }
        let stored = u64_at(b, 56);
        let computed = xxh3_64(&b[0..56]);
        if stored != computed {
            return Err(FormatError::Checksum {
                what: "header".into(),
                stored,
                computed,
            });
        }
        let header_size = u32_at(b, 12);
        if header_size as usize != HEADER_SIZE {
            return Err(FormatError::malformed(
                "header",
                format!("header size {header_size}, expected {HEADER_SIZE}"),
            ));
        }
        let header = Header {
            version,
            required_features: u64_at(b, 16),
            optional_features: u64_at(b, 24),
            section_table_offset: u64_at(b, 32),
            section_count: u32_at(b, 40),
            file_size: u64_at(b, 48),
        };
        if header.file_size != len {
            return Err(if header.file_size > len {
                trunc("file", 0, header.file_size)
            } else {
                FormatError::malformed(
                    "file",
                    format!("{} bytes, header says {}", len, header.file_size),
                )
            });
        }
        let unknown = header.required_features & !KNOWN_FEATURES;
        if unknown != 0 {
            return Err(FormatError::UnsupportedFeatures { bits: unknown });
        }
        if header.section_count == 0 || header.section_count > 1024 {
            return Err(FormatError::malformed(
                "section table",
                format!("{} sections", header.section_count),
            ));
        }
        let t0 = header.section_table_offset;
        let tlen = header.section_count as u64 * SECTION_ENTRY_SIZE as u64 + 8;
        let t1 = t0
            .checked_add(tlen)
            .ok_or_else(|| FormatError::out_of_range("section table offset", format!("{t0}")))?;
        if t0 < HEADER_SIZE as u64 || t0 % SECTION_ALIGN != 0 {
            return Err(FormatError::out_of_range(
                "section table offset",
                format!("{t0}"),
            ));
        }
        if t1 > len {
            return Err(trunc("section table", t0, t1));
        }
        if t1 != len {
            return Err(FormatError::malformed(
                "file",
                format!("{} bytes after the section table", len - t1),
            ));
        }
        let table = &b[t0 as usize..t1 as usize];
        let body = &table[..table.len() - 8];
        let stored = u64_at(table, table.len() - 8);
        let computed = xxh3_64(body);
        if stored != computed {
            return Err(FormatError::Checksum {
                what: "section table".into(),
                stored,
                computed,
            });
        }
        let mut sections = Vec::with_capacity(header.section_count as usize);
        for e in body.chunks_exact(SECTION_ENTRY_SIZE) {
            let s = Section {
                kind: u32_at(e, 0),
                flags: u32_at(e, 4),
                offset: u64_at(e, 8),
                size: u64_at(e, 16),
                checksum: u64_at(e, 24),
            };
            let end = s.offset.checked_add(s.size).ok_or_else(|| {
                FormatError::out_of_range("section", format!("kind {} size {}", s.kind, s.size))
            })?;
            if s.offset < HEADER_SIZE as u64 || end > t0 {
                return Err(FormatError::out_of_range(
                    format!("section of kind {}", s.kind),
                    format!(
                        "bytes {}..{} outside {}..{}",
                        s.offset, end, HEADER_SIZE, t0
                    ),
                ));
            }
            sections.push(s);
        }
        // Sections must not overlap.
        let mut sorted = sections.clone();
        sorted.sort_by_key(|s| s.offset);
        for w in sorted.windows(2) {
            if w[0].offset + w[0].size > w[1].offset {
                return Err(FormatError::malformed(
                    "section table",
                    format!("sections of kind {} and {} overlap", w[0].kind, w[1].kind),
                ));
            }
        }
        let find = |kind: u32| -> Result<Section> {
            let mut it = sections.iter().filter(|s| s.kind == kind);
            let s = it.next().copied().ok_or_else(|| {
                FormatError::malformed("section table", format!("no section of kind {kind}"))
            })?;
            if it.next().is_some() {
                return Err(FormatError::malformed(
                    "section table",
                    format!("two sections of kind {kind}"),
                ));
            }
            Ok(s)
        };
        for s in &sections {
            let known = matches!(s.kind, SECTION_METADATA | SECTION_DIRECTORY | SECTION_DATA);
            if !known && s.flags & SECTION_REQUIRED != 0 {
                return Err(FormatError::malformed(
                    "section table",
                    format!(
                        "required section kind {} is unknown to this build: upgrade tern",
                        s.kind
                    ),
                ));
            }
            if !known {
                log::debug!("skipping unknown optional section kind {}", s.kind);
            }
        }
        let checked_section = |s: Section, what: &str| -> Result<&[u8]> {
            let bytes = &b[s.offset as usize..(s.offset + s.size) as usize];
            let computed = xxh3_64(bytes);
            if computed != s.checksum {
                return Err(FormatError::Checksum {
                    what: what.into(),
                    stored: s.checksum,
                    computed,
                });
            }
            Ok(bytes)
        };
        let meta_s = find(SECTION_METADATA)?;
        let dir_s = find(SECTION_DIRECTORY)?;
        let data_s = find(SECTION_DATA)?;
        let meta: ModelMeta = serde_json::from_slice(checked_section(meta_s, "metadata")?)
            .map_err(|e| FormatError::malformed("metadata", e.to_string()))?;
        let dir: Directory = serde_json::from_slice(checked_section(dir_s, "tensor directory")?)
            .map_err(|e| FormatError::malformed("tensor directory", e.to_string()))?;
        if data_s.offset % TENSOR_ALIGN != 0 {
            return Err(FormatError::malformed(
                "data section",
                format!("offset {} not {TENSOR_ALIGN}-aligned", data_s.offset),
            ));
        }
        // Validate the directory.
        let mut names = HashSet::with_capacity(dir.tensors.len());
        let mut ranges: Vec<(u64, u64, usize)> = Vec::with_capacity(dir.tensors.len());
        for (i, t) in dir.tensors.iter().enumerate() {
            if t.name.is_empty() {
                return Err(FormatError::malformed(
                    "tensor directory",
                    format!("empty tensor name (entry {i})"),
                ));
            }
            if !names.insert(t.name.as_str()) {
                return Err(FormatError::DuplicateTensor(t.name.clone()));
            }
            let what = || format!("tensor {:?}", t.name);
            let name_it = |e: FormatError| match e {
                FormatError::BadShape { detail, .. } => FormatError::BadShape {
                    what: what(),
                    detail,
                },
                FormatError::OutOfRange { what: w, detail } => FormatError::OutOfRange {
                    what: format!("{}: {w}", what()),
                    detail,
                },
                e => e,
            };
            element_count(&t.shape).map_err(name_it)?;
            if let Some(expect) = t.encoding.expected_bytes(&t.shape).map_err(name_it)? {
                if expect != t.size {
                    return Err(FormatError::malformed(
                        what(),
                        format!(
                            "{} of shape {:?} needs {expect} bytes, directory says {}",
                            t.encoding.name(),
                            t.shape,
                            t.size
                        ),
                    ));
                }
            }
            let end = t
                .offset
                .checked_add(t.size)
                .ok_or_else(|| FormatError::out_of_range(what(), "offset + size overflows"))?;
            if end > data_s.size {
                return Err(FormatError::out_of_range(
                    what(),
                    format!(
                        "bytes {}..{} beyond the data section ({} bytes)",
                        t.offset, end, data_s.size
                    ),
                ));
            }
            if t.offset % TENSOR_ALIGN != 0 {
                return Err(FormatError::malformed(
                    what(),
                    format!("offset {} not {TENSOR_ALIGN}-aligned", t.offset),
                ));
            }
            let f = t.encoding.required_feature();
            if f & !header.required_features != 0 {
                return Err(FormatError::malformed(
                    what(),
                    format!("uses feature {f:#x} not declared in the header"),
                ));
            }
            ranges.push((t.offset, end, i));
        }
        ranges.sort_unstable();
        for w in ranges.windows(2) {
            if w[0].1 > w[1].0 {
                return Err(FormatError::malformed(
                    "tensor directory",
                    format!(
                        "tensors {:?} and {:?} overlap",
                        dir.tensors[w[0].2].name, dir.tensors[w[1].2].name
                    ),
                ));
            }
        }
        let n = dir.tensors.len();
        let tensors = dir.tensors;
        Ok(Self {
            data,
            header,
            sections,
            meta,
            tensors,
            checked: (0..n).map(|_| OnceLock::new()).collect(),
        })
    }

    pub fn header(&self) -> &Header {
        &self.header
    }
    pub fn sections(&self) -> &[Section] {
        &self.sections
    }
    pub fn meta(&self) -> &ModelMeta {
        &self.meta
    }
    /// Run this file's model with another activation scheme (in memory; the file is unchanged):
    /// the same ternary weights as A8 or a4.8 (`tern bench --activations`).
    pub fn override_activations(&mut self, acts: crate::ActivationScheme) {
        self.meta.activations = acts;
    }
    pub fn tensors(&self) -> &[TensorInfo] {
        &self.tensors
    }
    /// The whole file image.
    pub fn file_bytes(&self) -> &[u8] {
        self.data.bytes()
    }
    /// Offset of the data section in the file.
    pub fn data_offset(&self) -> u64 {
        self.sections
            .iter()
            .find(|s| s.kind == SECTION_DATA)
            .map_or(DATA_OFFSET, |s| s.offset)
    }

    fn raw(&self, i: usize) -> &[u8] {
        let t = &self.tensors[i];
        let start = (self.data_offset() + t.offset) as usize;
        &self.data.bytes()[start..start + t.size as usize]
    }

    /// Tell the OS that a loader is done with tensor `name`'s mapped bytes (it copied or uploaded
    /// them): the pages leave the process's resident set now instead of staying there beside the
    /// copy, and are read again from the file if the tensor is used again. A no-op for an image in
    /// memory, off Unix, or for an unknown name; failures are ignored (it is only advice).
    pub fn release_tensor(&self, name: &str) {
        #[cfg(unix)]
        if let (Backing::Mmap(m), Some(i)) = (&self.data, self.index_of(name)) {
            let t = &self.tensors[i];
            let start = (self.data_offset() + t.offset) as usize;
            // SAFETY: the map is a read-only shared mapping of the file (`Mmap::map`): after
            // MADV_DONTNEED its pages are read back from the file on the next access, so every
            // `&[u8]` into it still sees the same bytes (the file must not change under a map,
            // which is already true of any read).
            let _ = unsafe {
                m.unchecked_advise_range(memmap2::UncheckedAdvice::DontNeed, start, t.size as usize)
            };
        }
        #[cfg(not(unix))]
        let _ = name;
    }

    /// Index of a tensor by name.
    pub fn index_of(&self, name: &str) -> Option<usize> {
        self.tensors.iter().position(|t| t.name == name)
    }

    /// A tensor by name; its checksum is verified on first access.
    pub fn tensor(&self, name: &str) -> Result<TensorView<'_>> {
        let i = self
            .index_of(name)
            .ok_or_else(|| FormatError::NoSuchTensor(name.to_string()))?;
        self.tensor_at(i)
    }

    /// A tensor by directory index; its checksum is verified on first access.
    pub fn tensor_at(&self, i: usize) -> Result<TensorView<'_>> {
        let info = self
            .tensors
            .get(i)
            .ok_or_else(|| FormatError::NoSuchTensor(format!("#{i}")))?;
        let bytes = self.raw(i);
        let ok = *self.checked[i].get_or_init(|| xxh3_64(bytes) == info.checksum);
        if !ok {
            return Err(FormatError::Checksum {
                what: format!("tensor {:?}", info.name),
                stored: info.checksum,
                computed: xxh3_64(bytes),
            });
        }
        Ok(TensorView { info, bytes })
    }

    /// Full verification: every tensor's checksum and full decode, and every byte of the file not
    /// covered by a checksum (alignment padding, gaps) must be zero. Returns the first failure.
    pub fn verify(&self) -> Result<()> {
        self.verify_with(|_, _| {})
    }

    /// [`TernFile::verify`] with a progress callback `(tensors done, total)`.
    pub fn verify_with(&self, mut progress: impl FnMut(usize, usize)) -> Result<()> {
        let b = self.data.bytes();
        let mut covered: Vec<(u64, u64)> = vec![(0, HEADER_SIZE as u64)];
        covered.push((self.header.section_table_offset, b.len() as u64));
        let data_off = self.data_offset();
        for s in &self.sections {
            if s.kind != SECTION_DATA {
                // Metadata and directory were checked on open; unknown optional sections were
                // skipped there but their bytes must not escape verification.
                let bytes = &b[s.offset as usize..(s.offset + s.size) as usize];
                let computed = xxh3_64(bytes);
                if computed != s.checksum {
                    return Err(FormatError::Checksum {
                        what: format!("section of kind {}", s.kind),
                        stored: s.checksum,
                        computed,
                    });
                }
                covered.push((s.offset, s.offset + s.size));
            }
        }
        for i in 0..self.tensors.len() {
            let v = self.tensor_at(i)?;
            let t = v.info;
            covered.push((data_off + t.offset, data_off + t.offset + t.size));
            self.validate_tensor(v)?;
            progress(i + 1, self.tensors.len());
        }
        covered.sort_unstable();
        let mut at = 0u64;
        for (s, e) in covered {
            if s > at {
                let gap = &b[at as usize..s as usize];
                if let Some(k) = gap.iter().position(|&x| x != 0) {
                    return Err(FormatError::NonZeroPadding {
                        what: "padding between sections/tensors".into(),
                        offset: at + k as u64,
                    });
                }
            }
            at = at.max(e);
        }
        Ok(())
    }

    /// Decode a tensor fully and check codec-level invariants (e.g. no invalid ternary codes).
    fn validate_tensor(&self, v: TensorView<'_>) -> Result<()> {
        let t = v.info;
        let wrap = |e: FormatError| match e {
            FormatError::Corrupt { codec, detail } => FormatError::Corrupt {
                codec,
                detail: format!("tensor {:?}: {detail}", t.name),
            },
            FormatError::Malformed { what, detail } => FormatError::Malformed {
                what: format!("tensor {:?}: {what}", t.name),
                detail,
            },
            e => e,
        };
        if let Encoding::Ternary {
            layout,
            group,
            scale_type,
        } = &t.encoding
        {
            let (rows, cols) = crate::encoding::rows_cols(&t.shape)?;
            crate::ternary::TernaryRef::new(*layout, rows, cols, *group, *scale_type, v.bytes)
                .and_then(|r| r.validate())
                .map_err(wrap)?;
        }
        let vals = v.to_f32().map_err(wrap)?;
        if vals.len() as u64 != t.n_elements() {
            return Err(FormatError::malformed(
                format!("tensor {:?}", t.name),
                "decoded element count differs from shape",
            ));
        }
        Ok(())
    }
}

/// The checksum tern uses everywhere: xxh3-64.
pub fn checksum(bytes: &[u8]) -> u64 {
    xxh3_64(bytes)
}

/// xxh3-64 of a whole file, streamed (provenance hashes of source files).
pub fn hash_file(path: &Path) -> Result<u64> {
    use std::io::Read;
    let mut f = File::open(path)?;
    let mut h = Xxh3::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f.read(&mut buf)?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(h.digest())
}
