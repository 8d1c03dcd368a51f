//! The device layer: adapter choice, mobile limits, capabilities, allocation with error scopes,
//! readback, device-lost and uncaptured-error handling.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use crate::device::memory::{MemoryStats, Tracked};
use crate::device::pipeline::{KernelKey, PipelineCache};
use crate::device::plan::Recorder;
use crate::error::{GpuError, Result};

/// Which device the caller wants (`--device gpu|cpu|auto`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DevicePreference {
    /// The best adapter there is; `NoAdapter` when none, so the caller falls back to the CPU.
    #[default]
    Auto,
    /// A GPU adapter is required (a software rasterizer such as lavapipe counts only when
    /// [`GpuOptions::allow_software`] is set).
    Gpu,
    /// No GPU: [`GpuContext::new`] returns [`GpuError::CpuRequested`].
    Cpu,
}

/// Largest storage binding tern ever asks for: 128 MiB, what mobile GPUs (and WebGPU's defaults)
/// give. Larger tensors are split into several bindings.
pub const MAX_BINDING_BYTES: u64 = 128 << 20;
/// Workgroup memory the kernels may use (WebGPU guarantees 16 KiB; wgpu's downlevel is 16352 B).
pub const WORKGROUP_MEMORY_BYTES: u32 = 16352;

/// Largest piece of data one `queue.write_buffer` stages (see [`GpuContext::write`]).
pub const UPLOAD_SLICE: u64 = 4 << 20;

/// Knobs of [`GpuContext::with_options`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GpuOptions {
    pub preference: DevicePreference,
    /// Accept a CPU-emulated adapter (lavapipe, SwiftShader, WARP). On by default so CI runs
    /// the kernels on lavapipe.
    pub allow_software: bool,
    /// Split tensors into bindings of at most this many bytes (rounded down to 256) instead of the
    /// adapter's limit; lets a test cross the split without allocating 128 MiB.
    pub binding_limit: Option<u64>,
    /// Force the integer kernels' dot product: `Some(true)` `dot4I8Packed`, `Some(false)` the
    /// plain byte sum; `None` (default) detects it ([`AdapterSummary::packed_dot`]). Tests run
    /// both on one adapter.
    pub packed_dot: Option<bool>,
    /// Cooperative matrices (tensor cores) for prefill: `None` (default) uses them where the
    /// adapter has them ([`AdapterSummary::coop_matrix`]); `Some(false)` never asks for the
    /// feature (the device opens as on an adapter without it).
    pub coop_matrix: Option<bool>,
}

impl Default for GpuOptions {
    fn default() -> Self {
        GpuOptions {
            preference: DevicePreference::Auto,
            allow_software: true,
            binding_limit: None,
            packed_dot: None,
            coop_matrix: None,
        }
    }
}

/// What the adapter is and has, recorded once.
#[derive(Debug, Clone)]
pub struct AdapterSummary {
    pub name: String,
    pub backend: String,
    pub device_type: String,
    pub driver: String,
    /// Native f16 in shaders (`SHADER_F16`); only requested when present. No kernel needs it.
    pub shader_f16: bool,
    pub subgroups: bool,
    pub timestamp_query: bool,
    /// The integer kernels use `dot4I8Packed` (the adapter has the packed integer dot product:
    /// Vulkan 1.3 or `VK_KHR_shader_integer_dot_product`, which naga then emits as `OpSDot`);
    /// otherwise the plain byte sum (see [`GpuOptions::packed_dot`]).
    pub packed_dot: bool,
    /// The device was opened with cooperative matrices (wgpu's experimental
    /// `EXPERIMENTAL_COOPERATIVE_MATRIX`: Vulkan `VK_KHR_cooperative_matrix`, Metal simdgroup
    /// matrices) in the one configuration tern's kernels use — 16 × 16 × 16, f16 inputs, f32
    /// accumulators — with f16 shaders and subgroups exactly 32 wide ([`coop_matrix_config`]).
    /// The ternary prefill GEMM then runs on matrix units (`GemmTile::Coop`).
    pub coop_matrix: bool,
}

/// Whether `adapter` can run tern's cooperative-matrix kernels: the feature with f16 shaders and
/// subgroups, a 16 × 16 × 16 f16 × f16 → f32 configuration among those it reports, and subgroups
/// of exactly 32 invocations (the kernels' 128-invocation workgroups are 4 subgroups).
pub fn coop_matrix_config(adapter: &wgpu::Adapter) -> bool {
    use wgpu::CooperativeScalarType as T;
    let need = wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX
        | wgpu::Features::SHADER_F16
        | wgpu::Features::SUBGROUP;
    let info = adapter.get_info();
    adapter.features().contains(need)
        && info.subgroup_min_size == 32
        && info.subgroup_max_size == 32
        && adapter.cooperative_matrix_properties().iter().any(|c| {
            (c.m_size, c.n_size, c.k_size) == (16, 16, 16)
                && c.ab_type == T::F16
                && c.cr_type == T::F32
        })
}

/// An open GPU device with its queue, limits and pipeline cache.
pub struct GpuContext {
    pub device: wgpu::Device,
    pub queue: wgpu::Queue,
    pub info: AdapterSummary,
    /// The limits the device was opened with (mobile-sized; see [`GpuContext::with_options`]).
    pub limits: wgpu::Limits,
    binding_limit: u64,
    pipelines: PipelineCache,
    pub(super) lost: Arc<Mutex<Option<String>>>,
    pub(super) lost_flag: Arc<AtomicBool>,
    pub(super) uncaptured: Arc<Mutex<Vec<String>>>,
    /// GPU memory accounting: every buffer is created by [`GpuContext::create_buffer`], which
    /// checks the budget and samples the peak (see `memory.rs` of this folder).
    pub(crate) mem: super::memory::MemoryCounter,
    /// A GEMM on cooperative matrices was recorded on this context ([`GpuContext::prefill_path`]).
    coop_used: AtomicBool,
}

impl std::fmt::Debug for GpuContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GpuContext")
            .field("info", &self.info)
            .field("binding_limit", &self.binding_limit)
            .finish_non_exhaustive()
    }
}

fn device_type_name(t: wgpu::DeviceType) -> &'static str {
    match t {
        wgpu::DeviceType::DiscreteGpu => "discrete",
        wgpu::DeviceType::IntegratedGpu => "integrated",
        wgpu::DeviceType::VirtualGpu => "virtual",
        wgpu::DeviceType::Cpu => "cpu",
        wgpu::DeviceType::Other => "other",
    }
}

/// Whether the adapter has the packed 4×8-bit integer dot product in shaders. wgpu enables it
/// (and naga emits `OpSDot` for `dot4I8Packed`) on Vulkan 1.3 devices or with
/// `VK_KHR_shader_integer_dot_product`; elsewhere naga polyfills it, and tern's plain byte sum is
/// as good. Only Vulkan is queried; other backends report `false`.
fn adapter_has_packed_dot(adapter: &wgpu::Adapter) -> bool {
    #[cfg(any(target_os = "linux", target_os = "android", windows))]
    {
        // SAFETY: reads the properties wgpu recorded for the adapter; no Vulkan handle is used
        // and the guard is dropped before the adapter is.
        if let Some(hal) = unsafe { adapter.as_hal::<wgpu::hal::api::Vulkan>() } {
            let caps = hal.physical_device_capabilities();
            const VK_API_1_3: u32 = (1 << 22) | (3 << 12);
            return caps.properties().api_version >= VK_API_1_3
                || caps.supports_extension(c"VK_KHR_shader_integer_dot_product");
        }
    }
    let _ = adapter;
    false
}

impl GpuContext {
    /// Whether the device runs tern's cooperative-matrix kernels ([`AdapterSummary::coop_matrix`]).
    pub fn coop_matrix(&self) -> bool {
        self.info.coop_matrix
    }

    pub(crate) fn note_coop_prefill(&self) {
        self.coop_used.store(true, Ordering::Relaxed);
    }

    /// The prefill path that ran on this context so far: `coop-matrix` once a GEMM ran on
    /// cooperative matrices (tensor cores), else `classic` (the integer-dot tiles). `tern bench`
    /// reports it (`prefill_path`).
    pub fn prefill_path(&self) -> &'static str {
        if self.coop_used.load(Ordering::Relaxed) {
            "coop-matrix"
        } else {
            "classic"
        }
    }

    /// The integer dot product the ternary kernels are built with on this adapter.
    pub fn dot_kind(&self) -> crate::device::pipeline::DotKind {
        if self.info.packed_dot {
            crate::device::pipeline::DotKind::Packed
        } else {
            crate::device::pipeline::DotKind::Plain
        }
    }

    /// Open the preferred device with default options.
    pub fn new(preference: DevicePreference) -> Result<Self> {
        Self::with_options(GpuOptions {
            preference,
            ..GpuOptions::default()
        })
    }

    /// Open a device. Limits are `wgpu::Limits::downlevel_defaults()` (what mobile GPUs give:
    /// 4 storage buffers per stage, 16352 B of workgroup memory, 256 invocations) with the storage
    /// binding at most 128 MiB and the buffer size at most the adapter's; features: only
    /// `SHADER_F16` and `TIMESTAMP_QUERY`, each when the adapter has it.
    pub fn with_options(opts: GpuOptions) -> Result<Self> {
        if opts.preference == DevicePreference::Cpu {
            return Err(GpuError::CpuRequested);
        }
        let instance =
            wgpu::Instance::new(wgpu::InstanceDescriptor::new_without_display_handle_from_env());
        let adapter = pollster::block_on(instance.request_adapter(&wgpu::RequestAdapterOptions {
            power_preference: wgpu::PowerPreference::HighPerformance,
            force_fallback_adapter: false,
            compatible_surface: None,
            apply_limit_buckets: false,
        }))
        .map_err(|e| GpuError::NoAdapter(format!(": {e}")))?;
        let ai = adapter.get_info();
        if ai.device_type == wgpu::DeviceType::Cpu && !opts.allow_software {
            return Err(GpuError::NoAdapter(format!(
                " (only the software adapter `{}`, and software adapters are not allowed)",
                ai.name
            )));
        }
        let name = ai.name.clone();
        let unsupported = |detail: String| GpuError::Unsupported {
            adapter: name.clone(),
            detail,
        };
        let down = adapter.get_downlevel_capabilities();
        if !down.flags.contains(wgpu::DownlevelFlags::COMPUTE_SHADERS) {
            return Err(unsupported("no compute shaders".into()));
        }
        let al = adapter.limits();
        let mut limits = wgpu::Limits::downlevel_defaults();
        limits.max_storage_buffer_binding_size =
            al.max_storage_buffer_binding_size.min(MAX_BINDING_BYTES);
        limits.max_buffer_size = al
            .max_buffer_size
            .min(limits.max_buffer_size.max(MAX_BINDING_BYTES));
        limits.min_storage_buffer_offset_alignment = al.min_storage_buffer_offset_alignment;
        limits.min_uniform_buffer_offset_alignment = al.min_uniform_buffer_offset_alignment;
        let needs: [(&str, u32, u32); 4] = [
            (
                "storage buffers per shader stage",
                al.max_storage_buffers_per_shader_stage,
                4,
            ),
            (
                "invocations per workgroup",
                al.max_compute_invocations_per_workgroup,
                256,
            ),
            ("workgroup size x", al.max_compute_workgroup_size_x, 256),
            (
                "workgroup memory bytes",
                al.max_compute_workgroup_storage_size,
                WORKGROUP_MEMORY_BYTES,
            ),
        ];
        for (what, have, need) in needs {
            if have < need {
                return Err(unsupported(format!("{what}: {have} < {need}")));
            }
        }
        if al.max_storage_buffer_binding_size < (1 << 20) {
            return Err(unsupported(format!(
                "storage bindings of only {} bytes",
                al.max_storage_buffer_binding_size
            )));
        }
        let af = adapter.features();
        let mut features = wgpu::Features::empty();
        for f in [wgpu::Features::SHADER_F16, wgpu::Features::TIMESTAMP_QUERY] {
            if af.contains(f) {
                features |= f;
            }
        }
        let coop = opts.coop_matrix != Some(false) && coop_matrix_config(&adapter);
        let mut experimental = wgpu::ExperimentalFeatures::disabled();
        if coop {
            features |= wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX | wgpu::Features::SUBGROUP;
            // SAFETY: wgpu marks its experimental features unsafe because their validation is
            // incomplete; tern compiles the one kernel that uses them (ternary_gemm_coop.wgsl,
            // checked by naga in the registry test and bit-exact with the reference in the
            // parity harness) only on a device with the configuration it needs.
            experimental = unsafe { wgpu::ExperimentalFeatures::enabled() };
        }
        let (device, queue) = pollster::block_on(adapter.request_device(&wgpu::DeviceDescriptor {
            label: Some("tern"),
            required_features: features,
            required_limits: limits.clone(),
            experimental_features: experimental,
            memory_hints: wgpu::MemoryHints::Performance,
            trace: wgpu::Trace::Off,
        }))
        .map_err(|e| GpuError::RequestDevice(e.to_string()))?;

        // wgpu's default for an error nobody captured is to panic: record it instead.
        let uncaptured = Arc::new(Mutex::new(Vec::new()));
        let sink = Arc::clone(&uncaptured);
        device.on_uncaptured_error(Arc::new(move |e: wgpu::Error| {
            log::error!("uncaptured wgpu error: {e}");
            if let Ok(mut v) = sink.lock() {
                v.push(e.to_string());
            }
        }));
        let lost = Arc::new(Mutex::new(None));
        let lost_flag = Arc::new(AtomicBool::new(false));
        let (l2, f2) = (Arc::clone(&lost), Arc::clone(&lost_flag));
        device.set_device_lost_callback(move |reason, msg| {
            log::error!("GPU device lost ({reason:?}): {msg}");
            if let Ok(mut g) = l2.lock() {
                *g = Some(if msg.is_empty() {
                    format!("{reason:?}")
                } else {
                    format!("{reason:?}: {msg}")
                });
            }
            f2.store(true, Ordering::SeqCst);
        });

        let mut binding_limit = limits
            .max_storage_buffer_binding_size
            .min(limits.max_buffer_size);
        if let Some(b) = opts.binding_limit {
            binding_limit = binding_limit.min(b.max(256));
        }
        binding_limit = binding_limit / 256 * 256;
        let info = AdapterSummary {
            name: ai.name,
            backend: format!("{:?}", ai.backend),
            device_type: device_type_name(ai.device_type).into(),
            driver: format!("{} {}", ai.driver, ai.driver_info)
                .trim()
                .to_string(),
            shader_f16: features.contains(wgpu::Features::SHADER_F16),
            subgroups: af.contains(wgpu::Features::SUBGROUP),
            timestamp_query: features.contains(wgpu::Features::TIMESTAMP_QUERY),
            packed_dot: opts
                .packed_dot
                .unwrap_or_else(|| adapter_has_packed_dot(&adapter)),
            coop_matrix: coop,
        };
        log::info!(
            "GPU: {} ({}, {}), binding limit {} B",
            info.name,
            info.backend,
            info.device_type,
            binding_limit
        );
        let mem = super::memory::MemoryCounter::new();
        // wgpu made buffers of its own when the device was opened: a non-zero count means the
        // driver's allocator counts buffer memory on this backend.
        let driver = device.get_internal_counters().hal.buffer_memory.read() > 0;
        mem.driver.store(driver, Ordering::Relaxed);
        Ok(GpuContext {
            device,
            queue,
            info,
            limits,
            binding_limit,
            pipelines: PipelineCache::default(),
            lost,
            lost_flag,
            uncaptured,
            mem,
            coop_used: AtomicBool::new(false),
        })
    }

    /// Largest byte size of one storage binding (tensors above it are split).
    pub fn binding_limit(&self) -> u64 {
        self.binding_limit
    }

    /// A storage buffer of `size` bytes (at least 4), allocated inside error scopes so that
    /// running out of memory or exceeding a limit is a typed error, not a panic.
    pub fn create_buffer(
        &self,
        what: &str,
        size: u64,
        usage: wgpu::BufferUsages,
    ) -> Result<wgpu::Buffer> {
        self.check_alive()?;
        let size = size.max(4).div_ceil(4) * 4;
        if size > self.limits.max_buffer_size {
            return Err(GpuError::TooLarge {
                what: what.into(),
                detail: format!(
                    "{size} bytes, the adapter's buffers hold at most {}",
                    self.limits.max_buffer_size
                ),
            });
        }
        self.check_budget(what, size)?;
        let oom = self.device.push_error_scope(wgpu::ErrorFilter::OutOfMemory);
        let val = self.device.push_error_scope(wgpu::ErrorFilter::Validation);
        let buf = self.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some(what),
            size,
            usage,
            mapped_at_creation: false,
        });
        let v = pollster::block_on(val.pop());
        let o = pollster::block_on(oom.pop());
        if let Some(e) = o {
            log::warn!("out of GPU memory for {what} ({size} B): {e}");
            return Err(GpuError::OutOfMemory {
                what: what.into(),
                bytes: size,
            });
        }
        if let Some(e) = v {
            return Err(GpuError::Wgpu {
                what: format!("allocating {what}"),
                detail: e.to_string(),
            });
        }
        self.mem.own.fetch_add(size, Ordering::Relaxed);
        self.sample();
        Ok(buf)
    }

    /// Cap every later allocation at `budget` bytes of live GPU memory (`None`: no cap).
    pub fn set_budget(&self, budget: Option<u64>) {
        self.mem
            .budget
            .store(budget.unwrap_or(u64::MAX), Ordering::Relaxed);
    }

    /// The budget set with [`GpuContext::set_budget`].
    pub fn budget(&self) -> Option<u64> {
        Some(self.mem.budget.load(Ordering::Relaxed)).filter(|&b| b != u64::MAX)
    }

    /// Bytes of GPU buffers alive now (see `device/memory.rs`: measured by the driver's
    /// allocator where it counts, else tern's own count).
    pub fn live_bytes(&self) -> u64 {
        if self.mem.driver.load(Ordering::Relaxed) {
            let c = self.device.get_internal_counters();
            c.hal.buffer_memory.read().max(0) as u64
        } else {
            self.mem.own.load(Ordering::Relaxed)
        }
    }

    /// Live bytes, their peak, the budget.
    pub fn memory_stats(&self) -> MemoryStats {
        self.sample();
        MemoryStats {
            live: self.live_bytes(),
            peak: self.mem.peak.load(Ordering::Relaxed),
            budget: self.budget(),
            measured: self.mem.driver.load(Ordering::Relaxed),
        }
    }

    /// Start measuring the peak again from the bytes alive now.
    pub fn reset_peak(&self) {
        self.free_deferred();
        self.mem.peak.store(self.live_bytes(), Ordering::Relaxed);
    }

    /// Record the live bytes into the peak.
    pub(crate) fn sample(&self) {
        self.mem
            .peak
            .fetch_max(self.live_bytes(), Ordering::Relaxed);
    }

    /// A guard releasing `bytes` from tern's own count when dropped.
    pub(crate) fn track(&self, bytes: u64) -> Tracked {
        self.mem.track(bytes)
    }

    /// Let wgpu free buffers that were dropped (their memory is returned on a poll).
    pub(crate) fn free_deferred(&self) {
        let _ = self.device.poll(wgpu::PollType::Poll);
    }

    /// Submit what is staged (pending writes) and wait, so wgpu frees its staging buffers.
    pub(crate) fn flush(&self) {
        self.mem.staged.store(0, Ordering::Relaxed);
        let idx = self.queue.submit([]);
        let _ = self.device.poll(wgpu::PollType::Wait {
            submission_index: Some(idx),
            timeout: None,
        });
    }

    /// `Err(OverBudget)` when `size` more bytes would exceed the budget.
    fn check_budget(&self, what: &str, size: u64) -> Result<()> {
        let Some(budget) = self.budget() else {
            return Ok(());
        };
        let mut live = self.live_bytes();
        if live.saturating_add(size) > budget {
            self.free_deferred();
            live = self.live_bytes();
        }
        if live.saturating_add(size) > budget {
            return Err(GpuError::OverBudget {
                what: format!("{what} ({size} bytes, with {live} bytes already allocated)"),
                budget,
                minimum: live.saturating_add(size),
                detail: String::new(),
            });
        }
        Ok(())
    }

    /// A storage buffer holding `data` (padded with zeros to a multiple of 4 bytes).
    pub fn upload(&self, what: &str, data: &[u8]) -> Result<wgpu::Buffer> {
        let buf = self.create_buffer(
            what,
            data.len() as u64,
            wgpu::BufferUsages::STORAGE
                | wgpu::BufferUsages::COPY_DST
                | wgpu::BufferUsages::COPY_SRC,
        )?;
        self.write(&buf, data);
        Ok(buf)
    }

    /// Write `data` at offset 0 of `buf` (zero-padded to a multiple of 4). wgpu stages every
    /// write in a buffer of its own until the next submission completes: whenever more than
    /// [`UPLOAD_SLICE`] bytes are staged they are flushed, so staging never takes more than
    /// about one slice of the budget (a large upload goes slice by slice).
    pub fn write(&self, buf: &wgpu::Buffer, data: &[u8]) {
        let whole = data.len() / 4 * 4;
        let mut at = 0;
        while at < whole {
            let end = (at + UPLOAD_SLICE as usize).min(whole);
            if self.mem.staged.load(Ordering::Relaxed) + (end - at) as u64 > UPLOAD_SLICE {
                self.flush();
            }
            self.queue
                .write_buffer(buf, at as u64, data.get(at..end).unwrap_or_default());
            self.mem
                .staged
                .fetch_add((end - at) as u64, Ordering::Relaxed);
            self.sample();
            at = end;
        }
        if whole < data.len() {
            let mut tail = [0u8; 4];
            for (t, &b) in tail.iter_mut().zip(data.get(whole..).unwrap_or_default()) {
                *t = b;
            }
            self.queue.write_buffer(buf, whole as u64, &tail);
        }
    }

    /// A storage buffer of `size` bytes, zeroed (wgpu zero-initializes new buffers).
    pub fn zeroed(&self, what: &str, size: u64) -> Result<wgpu::Buffer> {
        self.create_buffer(
            what,
            size,
            wgpu::BufferUsages::STORAGE
                | wgpu::BufferUsages::COPY_DST
                | wgpu::BufferUsages::COPY_SRC,
        )
    }

    /// A small uniform buffer with `data`.
    pub(crate) fn uniform(&self, data: &[u8]) -> Result<wgpu::Buffer> {
        let buf = self.create_buffer(
            "params",
            data.len() as u64,
            wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST,
        )?;
        self.write(&buf, data);
        Ok(buf)
    }

    /// A command encoder.
    pub fn encoder(&self) -> wgpu::CommandEncoder {
        self.device
            .create_command_encoder(&wgpu::CommandEncoderDescriptor {
                label: Some("tern"),
            })
    }

    /// The compute pipeline for `key`, compiled on first use (shader errors become typed errors).
    pub fn pipeline(&self, key: KernelKey) -> Result<Arc<wgpu::ComputePipeline>> {
        self.check_alive()?;
        self.pipelines.get(&self.device, key)
    }

    /// Number of pipelines compiled so far (each key once).
    pub fn pipelines_compiled(&self) -> usize {
        self.pipelines.len()
    }

    /// Bind `buffers` (binding 0, 1, ...) to `key`'s pipeline and record one dispatch.
    pub(crate) fn dispatch(
        &self,
        enc: &mut impl Recorder,
        key: KernelKey,
        buffers: &[&wgpu::Buffer],
        groups: (u32, u32, u32),
    ) -> Result<()> {
        let max = self.limits.max_compute_workgroups_per_dimension;
        if groups.0 > max || groups.1 > max || groups.2 > max {
            return Err(GpuError::TooLarge {
                what: key.to_string(),
                detail: format!("{groups:?} workgroups (at most {max} per dimension)"),
            });
        }
        if groups.0 == 0 || groups.1 == 0 || groups.2 == 0 {
            return Ok(());
        }
        let pipeline = self.pipeline(key)?;
        let layout = pipeline.get_bind_group_layout(0);
        let entries: Vec<wgpu::BindGroupEntry<'_>> = buffers
            .iter()
            .enumerate()
            .map(|(i, b)| wgpu::BindGroupEntry {
                binding: i as u32,
                resource: b.as_entire_binding(),
            })
            .collect();
        let label = key.to_string();
        let scope = self.device.push_error_scope(wgpu::ErrorFilter::Validation);
        let bg = self.device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: Some(&label),
            layout: &layout,
            entries: &entries,
        });
        if let Some(e) = pollster::block_on(scope.pop()) {
            return Err(GpuError::Wgpu {
                what: format!("binding {label}"),
                detail: e.to_string(),
            });
        }
        enc.record_dispatch(key, &pipeline, bg, groups);
        Ok(())
    }
}
