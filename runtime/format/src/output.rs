//! The data-safety rule for every command that writes a file: an output never replaces an input.
//!
//! Writers put their bytes in `<out>.part` and rename it over `out` when complete, so a failed
//! write leaves an existing `out` as it was. That alone does not protect the *inputs*: `tern pack
//! X.part -o X` writes into the very file it maps (SIGBUS, then the input is renamed away),
//! `tern delta create -o BASE` replaces the base, `tern run --dump-logits MODEL` overwrites the
//! model. [`refuse_input_as_output`] is the one check, called by each writer before it reads
//! anything: the output, and its temporary `.part` name, may not be an input — the same path, a
//! path that resolves to it (symlinks, `..`), the same file under another name (a hard link: same
//! device and inode), or a file inside an input directory.

use std::path::{Path, PathBuf};

use crate::error::{FormatError, Result};

/// The temporary name a writer uses for `out` (`<out>.part`), renamed over `out` when complete.
pub fn part_path(out: &Path) -> PathBuf {
    let mut s = out.as_os_str().to_owned();
    s.push(".part");
    PathBuf::from(s)
}

/// Writes `bytes` to `<out>.part`, then renames it over `out` (a failure removes the `.part` and
/// leaves an existing `out` as it was).
pub fn write_atomic(out: &Path, bytes: &[u8]) -> Result<()> {
    let part = part_path(out);
    if let Err(e) = std::fs::write(&part, bytes).and_then(|()| std::fs::rename(&part, out)) {
        let _ = std::fs::remove_file(&part);
        return Err(e.into());
    }
    Ok(())
}

/// True when `a` and `b` name the same existing file: equal canonical paths, or (on Unix) the same
/// device and inode (hard links). A path that does not exist is no file.
pub fn same_file(a: &Path, b: &Path) -> bool {
    let (Ok(ma), Ok(mb)) = (std::fs::metadata(a), std::fs::metadata(b)) else {
        return false;
    };
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        if ma.dev() == mb.dev() && ma.ino() == mb.ino() {
            return true;
        }
    }
    let _ = (&ma, &mb);
    matches!((a.canonicalize(), b.canonicalize()), (Ok(x), Ok(y)) if x == y)
}

/// `out` (or its parent directory, canonicalized, joined with its file name) lies inside the
/// directory `dir`.
fn inside_dir(dir: &Path, out: &Path) -> bool {
    let Ok(d) = dir.canonicalize() else {
        return false;
    };
    if !d.is_dir() {
        return false;
    }
    let resolved = match out.canonicalize() {
        Ok(p) => p,
        Err(_) => {
            let parent = match out.parent() {
                Some(p) if !p.as_os_str().is_empty() => p,
                _ => Path::new("."),
            };
            match (parent.canonicalize(), out.file_name()) {
                (Ok(p), Some(n)) => p.join(n),
                _ => return false,
            }
        }
    };
    resolved.starts_with(&d)
}

/// Refuses an output path that is, or resolves to, one of `inputs` — directly or through its
/// temporary `<out>.part` name — or that lies inside an input directory. Call before opening the
/// inputs; `what` names the output in the message (e.g. "output", "--dump-logits").
pub fn refuse_input_as_output(inputs: &[&Path], out: &Path, what: &str) -> Result<()> {
    let part = part_path(out);
    for input in inputs {
        let clash = same_file(input, out) || same_file(input, &part) || inside_dir(input, out);
        if clash {
            return Err(FormatError::InvalidArgument(format!(
                "{what} {} would overwrite the input {} (choose another output path)",
                out.display(),
                input.display()
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn inputs_are_never_outputs() {
        let d = std::env::temp_dir().join(format!("tern_output_rule_{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(d.join("sub")).unwrap();
        let x = d.join("x.tern");
        std::fs::write(&x, b"model").unwrap();
        let part = d.join("y.tern.part");
        std::fs::write(&part, b"model").unwrap();
        // The same path, a path through `..`, the `.part` of the output, a hard link.
        assert!(refuse_input_as_output(&[x.as_path()], &x, "output").is_err());
        assert!(
            refuse_input_as_output(&[x.as_path()], &d.join("sub/../x.tern"), "output").is_err()
        );
        assert!(refuse_input_as_output(&[part.as_path()], &d.join("y.tern"), "output").is_err());
        let link = d.join("hard.tern");
        std::fs::hard_link(&x, &link).unwrap();
        assert!(refuse_input_as_output(&[x.as_path()], &link, "output").is_err());
        // A new file inside an input directory.
        assert!(refuse_input_as_output(&[d.as_path()], &d.join("sub/new.tern"), "output").is_err());
        // Another, new file is fine.
        assert!(refuse_input_as_output(&[x.as_path()], &d.join("z.tern"), "output").is_ok());
        let _ = std::fs::remove_dir_all(&d);
    }
}
