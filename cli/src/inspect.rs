//! `tern inspect FILE [--json] [--verify]` for .tern and .gguf files.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::Args;
use serde::Serialize;

#[derive(Args)]
pub struct InspectArgs {
    /// A .tern or .gguf file.
    pub file: PathBuf,
    /// Print one JSON document instead of tables.
    #[arg(long)]
    pub json: bool,
    /// Decode every tensor, check every checksum and all padding; non-zero exit on any failure.
    #[arg(long)]
    pub verify: bool,
}

#[derive(Serialize)]
struct TensorRow {
    name: String,
    shape: Vec<u64>,
    encoding: String,
    bytes: u64,
    /// xxh3-64, hex. For GGUF tensors, computed over the tensor's bytes.
    checksum: String,
    elements: u64,
    bits_per_weight: f64,
    component: &'static str,
}

#[derive(Serialize, Default)]
struct Total {
    tensors: usize,
    bytes: u64,
    elements: u64,
    bits_per_weight: f64,
}

impl Total {
    fn add(&mut self, r: &TensorRow) {
        self.tensors += 1;
        self.bytes += r.bytes;
        self.elements += r.elements;
        self.bits_per_weight = if self.elements == 0 {
            0.0
        } else {
            self.bytes as f64 * 8.0 / self.elements as f64
        };
    }
}

#[derive(Serialize)]
struct Totals {
    bytes: u64,
    elements: u64,
    tensors: usize,
    file_bytes: u64,
    by_encoding: BTreeMap<String, Total>,
    by_component: BTreeMap<String, Total>,
}

#[derive(Serialize)]
struct Report {
    file: String,
    format: &'static str,
    metadata: serde_json::Value,
    tensors: Vec<TensorRow>,
    totals: Totals,
    #[serde(skip_serializing_if = "Option::is_none")]
    verified: Option<bool>,
}

/// Which part of a model a tensor belongs to (for the memory breakdown).
pub fn component(name: &str) -> &'static str {
    if name.starts_with("token_embd") {
        "embedding"
    } else if name.starts_with("output.") {
        "head"
    } else if name.contains("norm") {
        "norms"
    } else if name.starts_with("blk.") {
        "linear"
    } else {
        "other"
    }
}

fn row(name: &str, shape: Vec<u64>, encoding: String, bytes: u64, checksum: u64) -> TensorRow {
    let elements = shape.iter().product::<u64>();
    TensorRow {
        component: component(name),
        name: name.to_string(),
        bits_per_weight: if elements == 0 {
            0.0
        } else {
            bytes as f64 * 8.0 / elements as f64
        },
        shape,
        encoding,
        bytes,
        checksum: format!("{checksum:016x}"),
        elements,
    }
}

pub fn run(a: InspectArgs) -> Result<ExitCode> {
    // Only regular files: opening a FIFO would block until a writer appears, a device or a
    // directory is no model.
    let md = std::fs::metadata(&a.file).with_context(|| format!("opening {}", a.file.display()))?;
    if !md.is_file() {
        anyhow::bail!(
            "{} is not a regular file (inspect reads .tern and .gguf files)",
            a.file.display()
        );
    }
    let mut head = [0u8; 4];
    {
        use std::io::Read;
        let mut f = std::fs::File::open(&a.file)
            .with_context(|| format!("opening {}", a.file.display()))?;
        let _ = f.read(&mut head)?;
    }
    let file_bytes = std::fs::metadata(&a.file)?.len();
    let (format, metadata, tensors, verify_err) = if &head == b"GGUF" {
        inspect_gguf(&a)?
    } else {
        inspect_tern(&a)?
    };
    let mut totals = Totals {
        bytes: 0,
        elements: 0,
        tensors: tensors.len(),
        file_bytes,
        by_encoding: BTreeMap::new(),
        by_component: BTreeMap::new(),
    };
    for r in &tensors {
        totals.bytes += r.bytes;
        totals.elements += r.elements;
        totals
            .by_encoding
            .entry(r.encoding.clone())
            .or_default()
            .add(r);
        totals
            .by_component
            .entry(r.component.to_string())
            .or_default()
            .add(r);
    }
    let verified = a.verify.then_some(verify_err.is_none());
    let report = Report {
        file: a.file.display().to_string(),
        format,
        metadata,
        tensors,
        totals,
        verified,
    };
    if a.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print_tables(&report);
    }
    if let Some(e) = verify_err {
        eprintln!("verify FAILED: {e}");
        return Ok(ExitCode::FAILURE);
    }
    if a.verify && !a.json {
        println!("verify: OK (every tensor decoded, every checksum and padding byte checked)");
    }
    Ok(ExitCode::SUCCESS)
}

type Inspected = (
    &'static str,
    serde_json::Value,
    Vec<TensorRow>,
    Option<String>,
);

fn inspect_tern(a: &InspectArgs) -> Result<Inspected> {
    let f = tern_format::TernFile::open(&a.file)
        .with_context(|| format!("reading {}", a.file.display()))?;
    let mut meta = serde_json::to_value(f.meta())?;
    // The vocabulary is large and not useful on a terminal: summarize it.
    if let Some(tok) = meta.get_mut("tokenizer").and_then(|t| t.as_object_mut()) {
        for k in ["tokens", "token_types", "merges", "scores"] {
            if let Some(v) = tok.get(k).and_then(|v| v.as_array()).map(|v| v.len()) {
                tok.insert(k.to_string(), serde_json::json!(format!("<{v} entries>")));
            }
        }
    }
    if let Some(o) = meta.as_object_mut() {
        let h = f.header();
        o.insert(
            "format".into(),
            serde_json::json!({"version": h.version, "required_features": h.required_features, "file_size": h.file_size}),
        );
    }
    let rows = f
        .tensors()
        .iter()
        .map(|t| {
            row(
                &t.name,
                t.shape.clone(),
                t.encoding.name(),
                t.size,
                t.checksum,
            )
        })
        .collect();
    let err = if a.verify {
        // Bytes first (checksums, padding, decodes), then what the metadata says about them
        // (hyperparameters against each other and against the tensors present).
        f.verify()
            .and_then(|()| tern_format::check_hparams(&f))
            .err()
            .map(|e| e.to_string())
    } else {
        None
    };
    Ok(("tern", meta, rows, err))
}

fn inspect_gguf(a: &InspectArgs) -> Result<Inspected> {
    let g = tern_import::gguf::GgufFile::open(&a.file)
        .with_context(|| format!("reading {}", a.file.display()))?;
    let meta = tern_import::gguf_meta::metadata_summary(&g);
    let mut rows = Vec::new();
    let mut err = None;
    for t in g.tensors() {
        let bytes = g.tensor_bytes(t);
        let (size, sum) = match &bytes {
            Ok(b) => (b.len() as u64, xxhash_rust_hash(b)),
            Err(_) => (0, 0),
        };
        rows.push(row(
            &t.name,
            t.shape(),
            t.ggml_type.name().to_lowercase(),
            size,
            sum,
        ));
        if a.verify && err.is_none() {
            if let Err(e) = bytes.map_err(anyhow::Error::from).and_then(|b| {
                tern_import::gguf_import::decode_check(t, b).map_err(anyhow::Error::from)
            }) {
                err = Some(format!("tensor {:?}: {e:#}", t.name));
            }
        }
    }
    Ok(("gguf", meta, rows, err))
}

fn xxhash_rust_hash(b: &[u8]) -> u64 {
    tern_format::container::checksum(b)
}

fn print_tables(r: &Report) {
    println!(
        "file: {} ({}, {} bytes)",
        r.file, r.format, r.totals.file_bytes
    );
    if let Some(o) = r.metadata.as_object() {
        for (k, v) in o {
            let s = v.to_string();
            let s = if s.len() > 160 {
                format!(
                    "{}…",
                    &s[..s.char_indices().nth(160).map_or(s.len(), |c| c.0)]
                )
            } else {
                s
            };
            println!("  {k}: {s}");
        }
    }
    println!();
    println!(
        "{:<40} {:<16} {:>18} {:>14} {:>8}",
        "tensor", "encoding", "shape", "bytes", "bpw"
    );
    for t in &r.tensors {
        let shape = format!("{:?}", t.shape);
        println!(
            "{:<40} {:<16} {:>18} {:>14} {:>8.3}",
            t.name, t.encoding, shape, t.bytes, t.bits_per_weight
        );
    }
    println!();
    for (title, m) in [
        ("encoding", &r.totals.by_encoding),
        ("component", &r.totals.by_component),
    ] {
        println!(
            "{:<16} {:>8} {:>16} {:>12} {:>8}",
            title, "tensors", "bytes", "MiB", "bpw"
        );
        for (k, t) in m {
            println!(
                "{:<16} {:>8} {:>16} {:>12.2} {:>8.3}",
                k,
                t.tensors,
                t.bytes,
                t.bytes as f64 / 1048576.0,
                t.bits_per_weight
            );
        }
        println!();
    }
    println!(
        "total: {} tensors, {} bytes ({:.2} MiB) of tensor data, {:.3} bits/weight",
        r.totals.tensors,
        r.totals.bytes,
        r.totals.bytes as f64 / 1048576.0,
        if r.totals.elements == 0 {
            0.0
        } else {
            r.totals.bytes as f64 * 8.0 / r.totals.elements as f64
        }
    );
}
