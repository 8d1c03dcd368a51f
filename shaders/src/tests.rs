//! CPU-only checks of the WGSL sources: every kernel resolves its imports and validates with naga
//! (the per-variant check with override values is tern-gpu's registry test, where the keys
//! live), every `.wgsl` file is registered, and no struct or function is written twice.
#![allow(clippy::unwrap_used)] // tests may unwrap

use super::*;
use naga::valid::{Capabilities, ValidationFlags, Validator};
use std::collections::BTreeMap;

fn wgsl_dir() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("wgsl")
}

/// Every `.wgsl` file under `shaders/wgsl/`: (file name, text).
fn wgsl_files() -> Vec<(String, String)> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(wgsl_dir()).unwrap() {
        let path = e.unwrap().path();
        if path.extension().and_then(|x| x.to_str()) == Some("wgsl") {
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            out.push((name, std::fs::read_to_string(&path).unwrap()));
        }
    }
    out.sort();
    out
}

/// What naga may assume for `shader`: WebGPU's defaults (no f16, no subgroups), plus f16,
/// subgroups and cooperative matrices for the kernels that need them (run only where the device
/// has them).
pub(crate) fn capabilities(shader: Shader) -> Capabilities {
    if shader.needs_coop_matrix() {
        Capabilities::COOPERATIVE_MATRIX | Capabilities::SHADER_FLOAT16 | Capabilities::SUBGROUP
    } else {
        Capabilities::empty()
    }
}

/// Parse, validate with WebGPU's default capabilities (no f16, no subgroups; [`capabilities`]):
/// every kernel's final source; workgroup memory stays within WebGPU's guaranteed 16 KiB (16352 B downlevel).
#[test]
fn every_kernel_resolves_and_validates_with_naga() {
    for shader in Shader::ALL {
        let src = shader
            .source()
            .unwrap_or_else(|e| panic!("{}: {e}", shader.file()));
        assert_eq!(
            imports_of(shader.file(), &src),
            Ok(vec![]),
            "{}",
            shader.file()
        );
        let module = naga::front::wgsl::parse_str(&src)
            .unwrap_or_else(|e| panic!("{}: {}", shader.file(), e.emit_to_string(&src)));
        let mut v = Validator::new(ValidationFlags::all(), capabilities(shader));
        v.validate(&module)
            .unwrap_or_else(|e| panic!("{}: {}", shader.file(), e.emit_to_string(&src)));
        let wg_bytes: u32 = module
            .global_variables
            .iter()
            .filter(|(_, g)| g.space == naga::AddressSpace::WorkGroup)
            .map(|(_, g)| module.types[g.ty].inner.size(module.to_ctx()))
            .sum();
        assert!(
            wg_bytes <= 16352,
            "{}: {wg_bytes} B of workgroup memory",
            shader.file()
        );
    }
}

/// Every file is a kernel or a module, every module is imported by some kernel (directly or
/// not), and the kernels' and modules' files are the registered texts.
#[test]
fn every_file_is_registered_and_every_module_used() {
    let mut used: Vec<&str> = Vec::new();
    for shader in Shader::ALL {
        let mut todo = imports_of(shader.file(), shader.kernel_source()).unwrap();
        while let Some(m) = todo.pop() {
            if !used.contains(&m) {
                used.push(m);
                let (_, text) = MODULES.iter().find(|(n, _)| *n == m).unwrap();
                todo.extend(imports_of(m, text).unwrap());
            }
        }
    }
    for (name, _) in MODULES {
        assert!(
            used.contains(name),
            "module {name} is imported by no kernel"
        );
    }
    for (file, text) in wgsl_files() {
        let stem = file.trim_end_matches(".wgsl");
        let kernel = Shader::ALL.into_iter().find(|s| s.file() == file);
        let module = MODULES.iter().find(|(n, _)| *n == stem);
        match (kernel, module) {
            (Some(k), None) => assert_eq!(k.kernel_source(), text, "{file}"),
            (None, Some((_, m))) => assert_eq!(*m, text, "{file}"),
            _ => panic!("{file}: must be exactly one of a kernel (Shader) or a module (MODULES)"),
        }
    }
}

/// The top-level `struct Name { … }` and `fn name(…) … { … }` items of a WGSL text, comments
/// removed and whitespace normalized: (name, whole item text).
fn items(text: &str) -> Vec<(String, String)> {
    let src: String = text
        .lines()
        .map(|l| l.find("//").map_or(l, |i| &l[..i]))
        .collect::<Vec<_>>()
        .join("\n");
    let b = src.as_bytes();
    let (mut out, mut depth, mut i) = (Vec::new(), 0usize, 0usize);
    let word_at = |i: usize, w: &str| {
        src[i..].starts_with(w)
            && (i == 0 || !(b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_'))
            && b.get(i + w.len()).is_some_and(|c| c.is_ascii_whitespace())
    };
    while i < b.len() {
        match b[i] {
            b'{' => depth += 1,
            b'}' => depth = depth.saturating_sub(1),
            _ if depth == 0 && (word_at(i, "fn") || word_at(i, "struct")) => {
                let start = i;
                let open = start + src[start..].find('{').unwrap();
                let mut d = 0usize;
                let mut j = open;
                loop {
                    match b[j] {
                        b'{' => d += 1,
                        b'}' => {
                            d -= 1;
                            if d == 0 {
                                break;
                            }
                        }
                        _ => {}
                    }
                    j += 1;
                }
                let item = src[start..=j]
                    .split_whitespace()
                    .collect::<Vec<_>>()
                    .join(" ");
                let head = src[start..open]
                    .split_whitespace()
                    .take(2)
                    .collect::<Vec<_>>();
                let name = head.join(" ");
                let name = name.split('(').next().unwrap_or("").to_string();
                out.push((name, item));
                i = j + 1;
                continue;
            }
            _ => {}
        }
        i += 1;
    }
    out
}

/// Each WGSL struct and helper function is written once: the same item (name, signature and
/// body, whitespace aside) in two files fails; shared ones belong in an imported module.
#[test]
fn no_struct_or_function_is_defined_twice() {
    let mut seen: BTreeMap<String, String> = BTreeMap::new();
    let mut dups = Vec::new();
    let (mut count, mut heads) = (0, 0);
    for (file, text) in wgsl_files() {
        // Every item starts a line (the files' style), so the extraction must find one per head.
        heads += text
            .lines()
            .filter(|l| l.starts_with("fn ") || l.starts_with("struct "))
            .count();
        for (name, item) in items(&text) {
            count += 1;
            if let Some(first) = seen.get(&item) {
                dups.push(format!("{name}: in {first} and {file}"));
            } else {
                seen.insert(item, file.clone());
            }
        }
    }
    assert_eq!(count, heads, "items found vs `fn` / `struct` lines");
    assert!(dups.is_empty(), "defined twice:\n{}", dups.join("\n"));
}

/// The extraction the check above relies on finds a repeated item and tells different ones
/// apart.
#[test]
fn item_extraction_sees_structs_and_functions() {
    let a = "struct P { a: u32, }\n// fn hidden() {}\nfn f(x: u32) -> u32 {\n  if (x > 0u) { return x; }\n  return 1u;\n}\n";
    let b = "fn f(x: u32) -> u32 { if (x > 0u) { return x; } return 1u; }\nstruct P { a: u32, b: u32, }";
    let (ia, ib) = (items(a), items(b));
    assert_eq!(ia.len(), 2);
    assert_eq!(ia[0].0, "struct P");
    assert_eq!(ia[1].0, "fn f");
    assert_eq!(ia[1].1, ib[0].1);
    assert_ne!(ia[0].1, ib[1].1);
}
