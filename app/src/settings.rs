//! The settings panel: what the model is loaded with (device, memory budget, context; changing
//! one reloads it) and how replies are sampled (applied to the next reply).
//!
//! **Engine options section** ([`engine_options_ui`]): the session's KV-cache format (`--kv`:
//! f32, f16, q8, KIVI q4/q3/q2, absmax a4/a3), MiniCache cross-layer merging (off / on with the
//! engine's measured defaults, [`tern_engine::minicache_on`]) and the activation scheme of ternary
//! models (the file's, or a8 / a4.8 over the same weights, `LoadOptions::activations`). They
//! change what is loaded or allocated, so they apply on reload like the settings above. The live
//! panel's KV bar shows the chosen format's bytes and its ratio to f16.

use std::path::PathBuf;

use eframe::egui;
use tern_engine::session::Device;
use tern_engine::{KvQuant, SamplingParams};

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
    /// KV-cache format (`tern_engine::KvQuant`).
    pub kv: KvQuant,
    /// MiniCache with the engine's measured defaults.
    pub minicache: bool,
    /// Activation scheme override for ternary models (`None`: the file's).
    pub activations: Option<Activations>,
}

/// The activation schemes a ternary model can run with (same weights).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Activations {
    /// BitNet b1.58: INT8 absmax inputs.
    A8,
    /// BitNet a4.8: INT4 absmean, TopK-50% + INT8, INT8 down.
    A4_8,
}

impl Activations {
    pub fn name(self) -> &'static str {
        match self {
            Activations::A8 => "a8",
            Activations::A4_8 => "a4.8",
        }
    }

    pub fn scheme(self) -> tern_format::ActivationScheme {
        match self {
            Activations::A8 => tern_format::ActivationScheme::A8,
            Activations::A4_8 => tern_format::ActivationScheme::A4_8,
        }
    }
}

impl Default for LoadSettings {
    fn default() -> Self {
        Self {
            path: String::new(),
            device: Device::Auto,
            limit_memory: false,
            budget_mib: 1024,
            n_ctx: 2048,
            kv: KvQuant::default(),
            minicache: false,
            activations: None,
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
            kv: self.kv,
            minicache: self.minicache,
            activations: self.activations.map(Activations::scheme),
        }
    }
}

/// Settings of each reply: llama.cpp's default sampling until a model is loaded, then the
/// model's recommended sampling ([`SamplingParams::recommended`]).
#[derive(Debug, Clone, PartialEq)]
pub struct SampleSettings {
    /// 0 = greedy.
    pub temperature: f32,
    /// 0 = off.
    pub top_k: usize,
    /// 1 = off.
    pub top_p: f32,
    /// 0 = off.
    pub min_p: f32,
    /// 1 = off.
    pub repeat_penalty: f32,
    pub seed: u64,
    pub max_tokens: usize,
}

impl Default for SampleSettings {
    fn default() -> Self {
        let mut s = Self {
            temperature: 0.0,
            top_k: 0,
            top_p: 1.0,
            min_p: 0.0,
            repeat_penalty: 1.0,
            seed: 0,
            max_tokens: 256,
        };
        s.set_recommended(&SamplingParams::llama_cpp());
        s
    }
}

impl SampleSettings {
    pub fn params(&self) -> SamplingParams {
        SamplingParams {
            temperature: self.temperature,
            top_k: self.top_k,
            top_p: self.top_p,
            min_p: self.min_p,
            repeat_penalty: self.repeat_penalty,
            seed: self.seed,
            ..SamplingParams::default()
        }
    }

    /// Take a model's recommended sampling (seed and max tokens stay).
    pub fn set_recommended(&mut self, p: &SamplingParams) {
        self.temperature = p.temperature;
        self.top_k = p.top_k;
        self.top_p = p.top_p;
        self.min_p = p.min_p;
        self.repeat_penalty = p.repeat_penalty;
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
    engine_options_ui(ui, s);
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
            // The other controls act only when sampling: at temperature 0 the reply is the
            // argmax, so they are not shown.
            if s.temperature > 0.0 {
                let l = ui.label("Top-k");
                ui.add(egui::DragValue::new(&mut s.top_k).range(0..=1000))
                    .labelled_by(l.id)
                    .on_hover_text("0: off");
                ui.end_row();
                let l = ui.label("Top-p");
                ui.add(egui::Slider::new(&mut s.top_p, 0.01..=1.0))
                    .labelled_by(l.id)
                    .on_hover_text("1: off");
                ui.end_row();
                let l = ui.label("Min-p");
                ui.add(egui::Slider::new(&mut s.min_p, 0.0..=1.0))
                    .labelled_by(l.id)
                    .on_hover_text("0: off");
                ui.end_row();
                let l = ui.label("Repeat penalty");
                ui.add(egui::Slider::new(&mut s.repeat_penalty, 0.5..=2.0))
                    .labelled_by(l.id)
                    .on_hover_text("1: off");
                ui.end_row();
                let l = ui.label("Seed");
                ui.add(egui::DragValue::new(&mut s.seed)).labelled_by(l.id);
                ui.end_row();
            } else {
                ui.label("");
                ui.weak("greedy: top-k, top-p, min-p and seed do not apply");
                ui.end_row();
            }
            let l = ui.label("Max tokens");
            ui.add(egui::DragValue::new(&mut s.max_tokens).range(1..=32768))
                .labelled_by(l.id);
            ui.end_row();
        });
}

/// Engine options that change how the model computes (KV-cache format, MiniCache, activation
/// scheme); applied on reload.
fn engine_options_ui(ui: &mut egui::Ui, s: &mut LoadSettings) {
    ui.collapsing("Engine options: KV cache, activations", |ui| {
        egui::Grid::new("engine_options")
            .num_columns(2)
            .show(ui, |ui| {
                ui.label("KV cache");
                egui::ComboBox::from_id_salt("kv_format")
                    .selected_text(s.kv.name())
                    .show_ui(ui, |ui| {
                        for q in KvQuant::ALL {
                            ui.selectable_value(&mut s.kv, q, q.name());
                        }
                    })
                    .response
                    .on_hover_text(
                        "f32: exact; f16; q8: absmax per head; q4/q3/q2: KIVI (per-channel keys, \
                         per-token values, f16 window); a4/a3: BitNet a4.8 absmax per head",
                    );
                ui.end_row();
                ui.label("MiniCache");
                ui.checkbox(&mut s.minicache, "merge adjacent deep layers")
                    .on_hover_text("--minicache on: the engine's measured defaults");
                ui.end_row();
                ui.label("Activations");
                egui::ComboBox::from_id_salt("activations")
                    .selected_text(s.activations.map_or("the file's", Activations::name))
                    .show_ui(ui, |ui| {
                        ui.selectable_value(&mut s.activations, None, "the file's");
                        for a in [Activations::A8, Activations::A4_8] {
                            ui.selectable_value(&mut s.activations, Some(a), a.name());
                        }
                    })
                    .response
                    .on_hover_text(
                        "ternary (BitNet) models only: run the same weights as a8 or a4.8",
                    );
                ui.end_row();
            });
    });
}
