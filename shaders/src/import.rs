//! The WGSL import step: a line `// #import name` (or `#import name`) in a `.wgsl` file names a
//! module of [`crate::MODULES`]; [`resolve`] inlines each module at most once per final source,
//! its own imports first (depth first, in the order written), so the output is deterministic and
//! every declaration precedes nothing it depends on textually (WGSL does not need that, readers
//! do). Import lines are removed from the output. A cycle, an unknown module or a malformed
//! import line is an [`ImportError`], never a panic.

use std::fmt;

/// Why a kernel's source could not be assembled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ImportError {
    /// `file` imports `module`, which is not registered.
    Unknown { file: String, module: String },
    /// The import chain returns to a module already being inlined (the chain, first to last).
    Cycle { chain: Vec<String> },
    /// An import line whose module name is empty or not `[a-z0-9_]`.
    Malformed { file: String, line: usize },
}

impl fmt::Display for ImportError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ImportError::Unknown { file, module } => {
                write!(f, "{file}: imports unknown WGSL module `{module}`")
            }
            ImportError::Cycle { chain } => {
                write!(f, "WGSL import cycle: {}", chain.join(" -> "))
            }
            ImportError::Malformed { file, line } => {
                write!(f, "{file}:{line}: malformed #import line")
            }
        }
    }
}

impl std::error::Error for ImportError {}

/// The module named by an import line, `None` for any other line; `Err(())` for an import line
/// without a valid name.
fn import_of(line: &str) -> Result<Option<&str>, ()> {
    let t = line.trim_start();
    let rest = t
        .strip_prefix("// #import")
        .or_else(|| t.strip_prefix("#import"));
    let Some(rest) = rest else {
        return Ok(None);
    };
    let name = rest.trim();
    let ok = !name.is_empty()
        && rest.starts_with(char::is_whitespace)
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
    if ok {
        Ok(Some(name))
    } else {
        Err(())
    }
}

/// The modules `text` imports, in the order written.
pub fn imports_of<'a>(file: &str, text: &'a str) -> Result<Vec<&'a str>, ImportError> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        match import_of(line) {
            Ok(Some(m)) => out.push(m),
            Ok(None) => {}
            Err(()) => {
                return Err(ImportError::Malformed {
                    file: file.to_string(),
                    line: i + 1,
                });
            }
        }
    }
    Ok(out)
}

/// `text` (the file `file`) with its imports inlined from `modules` (name, text): each module at
/// most once, its imports before it, the file itself last. The file's `enable …;` directives
/// (WGSL wants them before every declaration) come first.
pub fn resolve(file: &str, text: &str, modules: &[(&str, &str)]) -> Result<String, ImportError> {
    let mut out = String::with_capacity(text.len() * 2);
    let is_enable = |l: &str| l.starts_with("enable ") && l.trim_end().ends_with(';');
    for line in text.lines().filter(|l| is_enable(l)) {
        out.push_str(line);
        out.push('\n');
    }
    let rest: String = text
        .lines()
        .filter(|l| !is_enable(l))
        .flat_map(|l| [l, "\n"])
        .collect();
    let text = rest.as_str();
    let mut done: Vec<String> = Vec::new();
    let mut stack: Vec<String> = vec![file.to_string()];
    emit(file, text, modules, &mut stack, &mut done, &mut out)?;
    Ok(out)
}

fn emit(
    file: &str,
    text: &str,
    modules: &[(&str, &str)],
    stack: &mut Vec<String>,
    done: &mut Vec<String>,
    out: &mut String,
) -> Result<(), ImportError> {
    for m in imports_of(file, text)? {
        if done.iter().any(|d| d == m) {
            continue;
        }
        if stack.iter().any(|s| s == m) {
            let mut chain = stack.clone();
            chain.push(m.to_string());
            return Err(ImportError::Cycle { chain });
        }
        let Some(&(_, body)) = modules.iter().find(|(n, _)| *n == m) else {
            return Err(ImportError::Unknown {
                file: file.to_string(),
                module: m.to_string(),
            });
        };
        stack.push(m.to_string());
        emit(m, body, modules, stack, done, out)?;
        stack.pop();
        done.push(m.to_string());
    }
    for line in text.lines() {
        if !matches!(import_of(line), Ok(Some(_))) {
            out.push_str(line);
            out.push('\n');
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inlines_each_module_once_in_dependency_order() {
        let mods = [
            ("a", "// #import b\nfn a() {}"),
            ("b", "fn b() {}"),
            ("c", "#import b\n// #import a\nfn c() {}"),
        ];
        let src = resolve("k.wgsl", "// #import c\n// #import a\nfn main() {}", &mods);
        assert_eq!(
            src,
            Ok("fn b() {}\nfn a() {}\nfn c() {}\nfn main() {}\n".to_string())
        );
    }

    #[test]
    fn enable_directives_come_first() {
        let mods = [("a", "fn a() {}")];
        let src = resolve(
            "k.wgsl",
            "// k\nenable f16;\n// #import a\nfn main() {}",
            &mods,
        );
        assert_eq!(
            src,
            Ok("enable f16;\nfn a() {}\n// k\nfn main() {}\n".to_string())
        );
    }

    #[test]
    fn unknown_cycle_and_malformed_are_errors() {
        let mods = [("a", "// #import b\n"), ("b", "// #import a\n")];
        assert_eq!(
            resolve("k.wgsl", "// #import a\n", &mods),
            Err(ImportError::Cycle {
                chain: vec!["k.wgsl".into(), "a".into(), "b".into(), "a".into()]
            })
        );
        assert_eq!(
            resolve("k.wgsl", "fn f() {}\n// #import zz\n", &mods),
            Err(ImportError::Unknown {
                file: "k.wgsl".into(),
                module: "zz".into()
            })
        );
        for bad in ["// #import\n", "// #import Foo\n", "// #importa\n"] {
            assert_eq!(
                resolve("k.wgsl", bad, &mods),
                Err(ImportError::Malformed {
                    file: "k.wgsl".into(),
                    line: 1
                }),
                "{bad}"
            );
        }
        // A self import is a cycle too.
        assert!(matches!(
            resolve("a", "// #import a\n", &[("a", "")]),
            Err(ImportError::Cycle { .. })
        ));
    }
}
