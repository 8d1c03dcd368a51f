//! The settings panel: what the model is loaded with (device, memory budget, context; changing
//! one reloads it) and how replies are sampled (applied to the next reply).
//!
//! **Engine options section.** KV-cache formats / MiniCache (issue 14) and a4.8 / A8 activations
//! (issue 13) are engine options that this engine build does not have yet (they are being added
//! as a session's KV spec, `Session::with_kv(model, n_ctx, &KvSpec)`, and an activation override
//! at load, `Model::open_with_activations`). Their place is [`engine_options_ui`]: add a field to
//! [`LoadSettings`] (they change what is loaded or allocated, so they apply on reload), a control
//! there, carry it in [`LoadRequest`] and use it where `worker.rs` opens the model and makes the
//! session. The live panel needs nothing new: the KV bar's ratio to f16 comes from the session
//! report's bytes per position. Until then the section says what is missing instead of showing
//! controls that do nothing.

use std::path::PathBuf;

use eframe::egui;
use tern_engine::session::Device;
use tern_engine::SamplingParams;

use crate::worker::LoadRequest;

/// Settings that take effect when the model is (re)loaded.
#[derive(Debug, Clone, PartialEq)]
pub struct LoadSettings {
    /// The path field's text; empty: the default model.
    pub path: String,
    pub device: Device,
    /// Limit GPU memory (`max_memory`) to `budget_mib`.
    pub limit_memory: bool,
    pub budget_mib: u64,
    /// KV-cache positions (0: the engine's default, the model's training context up to 4096).
    pub n_ctx: usize,
}

impl Default for LoadSettings {
    fn default() -> Self {
        Self {
            path: String::new(),
            device: Device::Auto,
            limit_memory: false,
            budget_mib: 1024,
            n_ctx: 2048,
        }
    }
}

impl LoadSettings {
    pub fn request(&self) -> LoadRequest {
        let p = self.path.trim();
        LoadRequest {
            path: (!p.is_empty()).then(|| PathBuf::from(p)),
            device: self.device,
            max_memory: self.limit_memory.then_some(self.budget_mib << 20),
            n_ctx: self.n_ctx,
        }
    }
}

/// Settings of each reply.
#[derive(Debug, Clone, PartialEq)]
pub struct SampleSettings {
    /// 0 = greedy.
    pub temperature: f32,
    /// 0 = off.
    pub top_k: usize,
    /// 1 = off.
    pub top_p: f32,
    pub seed: u64,
    pub max_tokens: usize,
}

impl Default for SampleSettings {
    fn default() -> Self {
        Self {
            temperature: 0.0,
            top_k: 40,
            top_p: 0.95,
            seed: 0,
            max_tokens: 256,
        }
    }
}

impl SampleSettings {
    pub fn params(&self) -> SamplingParams {
        SamplingParams {
            temperature: self.temperature,
            top_k: self.top_k,
            top_p: self.top_p,
            seed: self.seed,
            ..SamplingParams::default()
        }
    }
}

pub fn device_name(d: Device) -> &'static str {
    match d {
        Device::Auto => "auto",
        Device::Gpu => "gpu",
        Device::Cpu => "cpu",
    }
}

/// The load settings' controls. Returns `true` when the user asks to apply them (reload).
pub fn load_ui(ui: &mut egui::Ui, s: &mut LoadSettings, changed: bool) -> bool {
    egui::Grid::new("load_settings")
        .num_columns(2)
        .show(ui, |ui| {
            ui.label("Device");
            egui::ComboBox::from_id_salt("device")
                .selected_text(device_name(s.device))
                .show_ui(ui, |ui| {
                    for d in [Device::Auto, Device::Gpu, Device::Cpu] {
                        ui.selectable_value(&mut s.device, d, device_name(d));
                    }
                })
                .response
                .on_hover_text("auto: a hardware GPU if the model runs on it, else the CPU");
            ui.end_row();
            ui.checkbox(&mut s.limit_memory, "Memory budget")
                .on_hover_text("max_memory: GPU bytes the model and its session may take");
            ui.add_enabled(
                s.limit_memory,
                egui::DragValue::new(&mut s.budget_mib)
                    .range(16..=1 << 20)
                    .suffix(" MiB"),
            );
            ui.end_row();
            ui.label("Context");
            ui.add(
                egui::DragValue::new(&mut s.n_ctx)
                    .range(0..=131072)
                    .suffix(" positions"),
            )
            .on_hover_text("KV-cache positions; 0: the model's training context, at most 4096");
            ui.end_row();
        });
    engine_options_ui(ui);
    ui.add_enabled(changed, egui::Button::new("Apply (reload model)"))
        .clicked()
}

/// The sampling controls.
pub fn sample_ui(ui: &mut egui::Ui, s: &mut SampleSettings) {
    egui::Grid::new("sample_settings")
        .num_columns(2)
        .show(ui, |ui| {
            let l = ui.label("Temperature");
            ui.add(egui::Slider::new(&mut s.temperature, 0.0..=2.0))
                .labelled_by(l.id)
                .on_hover_text("0: greedy");
            ui.end_row();
            let l = ui.label("Top-k");
            ui.add(egui::DragValue::new(&mut s.top_k).range(0..=1000))
                .labelled_by(l.id)
                .on_hover_text("0: off");
            ui.end_row();
            let l = ui.label("Top-p");
            ui.add(egui::Slider::new(&mut s.top_p, 0.0..=1.0))
                .labelled_by(l.id)
                .on_hover_text("1: off");
            ui.end_row();
            let l = ui.label("Seed");
            ui.add(egui::DragValue::new(&mut s.seed)).labelled_by(l.id);
            ui.end_row();
            let l = ui.label("Max tokens");
            ui.add(egui::DragValue::new(&mut s.max_tokens).range(1..=32768))
                .labelled_by(l.id);
            ui.end_row();
        });
}

/// Engine options that change how the model computes (KV-cache format, MiniCache, activation
/// scheme). See the module doc for how to add one.
fn engine_options_ui(ui: &mut egui::Ui) {
    ui.collapsing("Engine options: KV cache, activations", |ui| {
        ui.label(
            "KV-cache format / MiniCache (issue 14) and a4.8 / A8 activations (issue 13) are \
             not options of this engine build yet; they appear here when tern-engine's \
             LoadOptions has them. The KV cache's bytes and its ratio to f16 are in the live \
             panel.",
        );
    });
}
