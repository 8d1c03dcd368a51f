//! Issue 12: `tern pack` never destroys its input or an existing output. The output is written as
//! `<out>.part` and renamed when complete; `-o` naming the input (or a file inside the input
//! directory, which is mapped while packing) is refused before anything is written.

use std::process::Command;

fn pack(input: &std::path::Path, out: &std::path::Path) -> std::process::Output {
    Command::new(tern_tests::tern_bin())
        .arg("pack")
        .arg(input)
        .arg("-o")
        .arg(out)
        .output()
        .unwrap()
}

#[test]
fn pack_refuses_to_overwrite_its_input_and_keeps_old_outputs() {
    let dir = tern_tests::scratch("pack_safety");
    // The first MiB of the real SmolLM2 GGUF: a valid header, tensors cut off.
    let gguf = std::fs::read(tern_tests::smollm2_gguf()).unwrap();
    let input = dir.join("cut.gguf");
    std::fs::write(&input, &gguf[..1 << 20]).unwrap();

    let o = pack(&input, &input);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("would overwrite the input"), "{err}");
    assert_eq!(std::fs::read(&input).unwrap(), &gguf[..1 << 20]);
    // The same file through another spelling of its path.
    let o = pack(&input, &dir.join(".").join("cut.gguf"));
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(std::fs::read(&input).unwrap(), &gguf[..1 << 20]);

    // A pack that fails half way leaves an existing output as it was, and no partial file.
    let out = dir.join("keep.tern");
    std::fs::write(&out, b"an older model").unwrap();
    let o = pack(&input, &out);
    assert_eq!(
        o.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert_eq!(std::fs::read(&out).unwrap(), b"an older model");
    assert!(!dir.join("keep.tern.part").exists());

    // A Hugging Face directory: its own files cannot be the output.
    let hf = dir.join("hf");
    std::fs::create_dir_all(&hf).unwrap();
    std::fs::write(hf.join("config.json"), b"{}").unwrap();
    let o = pack(&hf, &hf.join("config.json"));
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("would overwrite the input"), "{err}");
    assert_eq!(std::fs::read(hf.join("config.json")).unwrap(), b"{}");
}
