//! # tern-app
//!
//! tern's desktop demo (`tern-app`): open a `.tern` or `.gguf` model (the default model when
//! none is given), chat with streaming output and a Stop button, change the device, sampling and
//! memory budget, and watch a live panel: prefill and decode tokens/s over time, memory by part
//! (weights by encoding and placement, just-in-time scratch, KV cache with its ratio to f16,
//! activations), KV-cache fill against capacity, and the adapter and backend in use.
//!
//! It uses only `tern-engine`'s public API (and `tern-import` to pack a `.gguf`), never
//! `tern-gpu` (checked by `tests/tests/layering.rs`, as for the CLI).
//!
//! ## Why eframe/egui 0.37 with default features off
//! egui 0.37 (eframe, egui-wgpu, egui_kittest; egui_plot 0.38) is the release built on wgpu 30,
//! the workspace's wgpu: the window and tern's GPU engine share one wgpu (one copy in the binary
//! and the build, the same Vulkan/Metal/DX12 backends). Default features are off: X11 only
//! (feature `wayland` adds native Wayland), no accesskit, clipboard, system fonts, glow or
//! WebGL, which keeps the clean build of this crate small on CI's 2 cores. egui_kittest drives
//! the same `TernApp::show` headlessly in the UI tests (`app/tests/ui.rs`).
//!
//! ## Threads
//! The window never runs the engine: [`worker`] owns the model and session on their own thread
//! and streams events back (load stages and packing progress, prefill progress, pieces,
//! throughput samples, the reports after each reply). Stop sets the session's cancel flag and
//! the app's stop flag; closing the window stops what runs and joins the thread.
//!
//! ## Modules
//! - [`app`]: the window (`TernApp`) and its state machine.
//! - [`worker`]: the engine thread, its commands and events.
//! - [`settings`]: load and sampling settings, and the place for engine options (KV format,
//!   MiniCache, activations) once the engine has them.
//! - [`panels`]: the live panel; [`stats`]: its data (throughput series, memory by part).
//! - [`plan`]: the memory plan shown before loading (budget, weights, scratch, per-format
//!   largest contexts).
//! - [`script`]: `--script`, the unattended run CI records the screenshot with.
//! - [`error`]: the app's error type (tern's typed errors with context).

pub mod app;
pub mod error;
pub mod panels;
pub mod plan;
pub mod script;
pub mod settings;
pub mod stats;
pub mod worker;

pub use app::{Status, TernApp};
pub use error::AppError;
pub use settings::LoadSettings;
