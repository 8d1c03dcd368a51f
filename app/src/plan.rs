//! The plan before loading (`tern_engine::plan`, `docs/planner.md`): with a memory budget set,
//! the settings panel shows what the model and a session would take in it — budget, weights,
//! scratch, the KV format and context the settings ask for and whether they fit, and per KV
//! format the largest context within the budget. The plan is computed on a thread of its own
//! whenever the path, device, budget, context or format change (it maps the file and, for a GPU,
//! opens a device context; nothing is loaded).

use std::path::{Path, PathBuf};
use std::sync::mpsc::{channel, Receiver};

use eframe::egui;
use tern_engine::{KvQuant, LoadOptions, Plan};

use crate::settings::LoadSettings;

/// What the plan is computed for: the settings that change it.
#[derive(Debug, Clone, PartialEq)]
struct Key {
    path: PathBuf,
    device: tern_engine::Device,
    budget: u64,
    n_ctx: u64,
}

/// The panel's plan: the last one computed, and the one being computed.
#[derive(Default)]
pub struct PlanView {
    key: Option<Key>,
    pending: Option<Receiver<Result<Plan, String>>>,
    /// The last plan (or why there is none) for `key`.
    pub result: Option<Result<Plan, String>>,
}

/// The `.tern` file the settings name: the path, or the default model in the cache. `None`
/// for a `.gguf` not yet packed (the plan needs the packed file).
fn tern_path(load: &LoadSettings) -> Option<PathBuf> {
    let p = load.path.trim();
    let path = if p.is_empty() {
        tern_import::fetch::cache_dir().join("SmolLM2-135M-Instruct.tern")
    } else {
        PathBuf::from(p)
    };
    let is_gguf = path
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("gguf"));
    (!is_gguf && path.is_file()).then_some(path)
}

/// The context the settings' session gets (0: the engine's default).
fn session_ctx(load: &LoadSettings, plan: &Plan) -> u64 {
    match load.n_ctx {
        0 => plan
            .context_cap
            .min(tern_engine::SessionOptions::DEFAULT_MAX_CTX as u64),
        n => n as u64,
    }
}

impl PlanView {
    /// Start computing the plan for `load` when its key changed; pick up a finished one.
    pub fn update(&mut self, load: &LoadSettings) {
        let key = match (load.limit_memory, tern_path(load)) {
            (true, Some(path)) => Some(Key {
                path,
                device: load.device,
                budget: load.budget_mib << 20,
                n_ctx: load.n_ctx as u64,
            }),
            _ => None,
        };
        if key != self.key {
            self.key = key.clone();
            self.result = None;
            self.pending = key.map(|k| {
                let (tx, rx) = channel();
                std::thread::spawn(move || {
                    let _ = tx.send(compute(&k.path, k.device, k.budget, k.n_ctx));
                });
                rx
            });
        }
        if let Some(rx) = &self.pending {
            if let Ok(r) = rx.try_recv() {
                self.result = Some(r);
                self.pending = None;
            }
        }
    }
}

fn compute(
    path: &Path,
    device: tern_engine::Device,
    budget: u64,
    n_ctx: u64,
) -> Result<Plan, String> {
    let opts = LoadOptions {
        device,
        max_memory: Some(budget),
        ..Default::default()
    };
    tern_engine::plan(path, &opts, Some(n_ctx).filter(|&n| n > 0)).map_err(|e| e.to_string())
}

fn mib(b: u64) -> String {
    format!("{:.1} MiB", b as f64 / 1048576.0)
}

/// One line per plan part, then the per-format table (what [`plan_ui`] shows; tests read it).
pub fn plan_lines(plan: &Plan, kv: KvQuant, n_ctx: u64) -> Vec<String> {
    let mut v = vec![
        format!("plan on {}: budget {}", plan.device, mib(plan.budget_bytes)),
        format!(
            "weights {}, scratch {}, reserve {}",
            mib(plan.weights_bytes),
            mib(plan.scratch_bytes),
            mib(plan.reserve_bytes)
        ),
    ];
    let fits = plan.check(kv, n_ctx).is_ok();
    v.push(format!(
        "this session: {} × {n_ctx} positions = KV {} — {}",
        kv.name(),
        mib(plan.kv_bytes(kv, n_ctx)),
        if fits { "fits" } else { "does NOT fit" }
    ));
    match plan.chosen {
        Some(c) => v.push(format!(
            "best format for {} positions: {}",
            c.context,
            c.kv.name()
        )),
        None => v.push(format!("no format fits {n_ctx} positions")),
    }
    for c in &plan.configs {
        v.push(format!(
            "{:<4} {:>7} B/token  max context {}",
            c.kv.name(),
            c.kv_bytes_per_token,
            c.max_context
        ));
    }
    v
}

/// The plan in the settings panel (a budget must be set; otherwise a hint).
pub fn plan_ui(ui: &mut egui::Ui, view: &mut PlanView, load: &LoadSettings) {
    view.update(load);
    egui::CollapsingHeader::new("Memory plan (before loading)")
        .default_open(true)
        .show(ui, |ui| {
            if !load.limit_memory {
                ui.label("Set a memory budget to see how the model and a context fit it.");
                return;
            }
            match &view.result {
                None if view.pending.is_some() => {
                    ui.label("planning…");
                    ui.ctx().request_repaint();
                }
                None => {
                    ui.label("no plan (a .gguf is planned once packed)");
                }
                Some(Err(e)) => {
                    ui.colored_label(ui.visuals().error_fg_color, e);
                }
                Some(Ok(p)) => {
                    let n = session_ctx(load, p);
                    for line in plan_lines(p, load.kv, n) {
                        ui.monospace(line);
                    }
                }
            }
        });
}

#[cfg(test)]
mod tests {
    use super::*;

    /// On the default model (when cached), the panel's lines carry the engine's plan: every
    /// format, the session's fit, the best format for the context.
    #[test]
    fn lines_show_the_engines_plan() {
        let load = LoadSettings {
            device: tern_engine::Device::Cpu,
            limit_memory: true,
            budget_mib: 200,
            n_ctx: 1024,
            ..LoadSettings::default()
        };
        let Some(path) = tern_path(&load) else {
            eprintln!("skipping: the default model is not cached");
            return;
        };
        let mut view = PlanView::default();
        let t0 = std::time::Instant::now();
        while view.result.is_none() {
            view.update(&load);
            assert!(t0.elapsed().as_secs() < 120, "plan timed out");
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        let p = view.result.clone().unwrap().unwrap();
        let want = compute(&path, tern_engine::Device::Cpu, 200 << 20, 1024).unwrap();
        assert_eq!(p, want);
        let lines = plan_lines(&p, load.kv, 1024);
        assert_eq!(lines.len(), 4 + KvQuant::ALL.len());
        assert!(lines[2].ends_with("— fits"), "{lines:?}");
        let best = p.chosen.unwrap().kv.name();
        assert!(lines[3].ends_with(best), "{lines:?}");
        // A budget of the weights alone: the session does not fit.
        let tight = compute(&path, tern_engine::Device::Cpu, p.weights_bytes, 1024).unwrap();
        let lines = plan_lines(&tight, load.kv, 1024);
        assert!(lines[2].ends_with("does NOT fit"), "{lines:?}");
        assert_eq!(lines[3], "no format fits 1024 positions");
    }
}
