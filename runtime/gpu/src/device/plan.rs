//! Where launchers put their work: straight into a `wgpu::CommandEncoder` (tests, one-off
//! work), or into a [`Plan`] that is built once and encoded again for every decode step.
//!
//! A launcher checks shapes, creates its parameter buffer and bind group, and hands the result to
//! a [`Recorder`]. Recording into a `Plan` moves all of that (and its error scopes) out of the
//! per-token path: a step is then one compute pass of `set_pipeline` / `set_bind_group` /
//! `dispatch_workgroups` triples. Values that change per step (positions, the number of cached
//! tokens, token ids) live in buffers the caller rewrites with `queue.write_buffer` before
//! submitting.

use std::sync::Arc;

use crate::device::pipeline::KernelKey;

/// A sink for launchers' dispatches and buffer clears.
pub trait Recorder {
    fn record_dispatch(
        &mut self,
        key: KernelKey,
        pipeline: &Arc<wgpu::ComputePipeline>,
        bind_group: wgpu::BindGroup,
        groups: (u32, u32, u32),
    );
    fn record_clear(&mut self, buf: &wgpu::Buffer);
    fn record_copy(
        &mut self,
        src: &wgpu::Buffer,
        src_offset: u64,
        dst: &wgpu::Buffer,
        dst_offset: u64,
        size: u64,
    );
}

impl Recorder for wgpu::CommandEncoder {
    fn record_dispatch(
        &mut self,
        key: KernelKey,
        pipeline: &Arc<wgpu::ComputePipeline>,
        bind_group: wgpu::BindGroup,
        groups: (u32, u32, u32),
    ) {
        let label = key.to_string();
        let mut pass = self.begin_compute_pass(&wgpu::ComputePassDescriptor {
            label: Some(&label),
            timestamp_writes: None,
        });
        pass.set_pipeline(pipeline);
        pass.set_bind_group(0, &bind_group, &[]);
        pass.dispatch_workgroups(groups.0, groups.1, groups.2);
    }

    fn record_clear(&mut self, buf: &wgpu::Buffer) {
        self.clear_buffer(buf, 0, None);
    }

    fn record_copy(
        &mut self,
        src: &wgpu::Buffer,
        src_offset: u64,
        dst: &wgpu::Buffer,
        dst_offset: u64,
        size: u64,
    ) {
        self.copy_buffer_to_buffer(src, src_offset, dst, dst_offset, size);
    }
}

/// One recorded command.
#[derive(Debug, Clone)]
enum Step {
    Dispatch {
        key: KernelKey,
        pipeline: Arc<wgpu::ComputePipeline>,
        bind_group: wgpu::BindGroup,
        groups: (u32, u32, u32),
    },
    Clear(wgpu::Buffer),
    Copy {
        src: wgpu::Buffer,
        src_offset: u64,
        dst: wgpu::Buffer,
        dst_offset: u64,
        size: u64,
    },
}

/// A recorded sequence of dispatches (pipelines, bind groups and parameter buffers already
/// made), encoded into a command encoder as often as needed.
#[derive(Debug, Clone, Default)]
pub struct Plan {
    steps: Vec<Step>,
}

impl Recorder for Plan {
    fn record_dispatch(
        &mut self,
        key: KernelKey,
        pipeline: &Arc<wgpu::ComputePipeline>,
        bind_group: wgpu::BindGroup,
        groups: (u32, u32, u32),
    ) {
        self.steps.push(Step::Dispatch {
            key,
            pipeline: Arc::clone(pipeline),
            bind_group,
            groups,
        });
    }

    fn record_clear(&mut self, buf: &wgpu::Buffer) {
        self.steps.push(Step::Clear(buf.clone()));
    }

    fn record_copy(
        &mut self,
        src: &wgpu::Buffer,
        src_offset: u64,
        dst: &wgpu::Buffer,
        dst_offset: u64,
        size: u64,
    ) {
        self.steps.push(Step::Copy {
            src: src.clone(),
            src_offset,
            dst: dst.clone(),
            dst_offset,
            size,
        });
    }
}

impl Plan {
    pub fn new() -> Self {
        Self::default()
    }

    /// Number of compute dispatches in the plan.
    pub fn dispatches(&self) -> usize {
        self.steps
            .iter()
            .filter(|s| matches!(s, Step::Dispatch { .. }))
            .count()
    }

    /// Append another plan's steps.
    pub fn extend(&mut self, other: &Plan) {
        self.steps.extend(other.steps.iter().cloned());
    }

    /// Kernel keys of the dispatches, in order (for per-kernel profiles).
    pub fn keys(&self) -> Vec<KernelKey> {
        self.steps
            .iter()
            .filter_map(|s| match s {
                Step::Dispatch { key, .. } => Some(*key),
                _ => None,
            })
            .collect()
    }

    /// Encode the plan: consecutive dispatches share one compute pass (wgpu orders them with
    /// the barriers their buffer usages need); clears and copies end the pass.
    pub fn encode(&self, enc: &mut wgpu::CommandEncoder) {
        let mut i = 0;
        while i < self.steps.len() {
            match &self.steps[i] {
                Step::Dispatch { .. } => {
                    let mut pass = enc.begin_compute_pass(&wgpu::ComputePassDescriptor {
                        label: Some("tern plan"),
                        timestamp_writes: None,
                    });
                    while let Some(Step::Dispatch {
                        pipeline,
                        bind_group,
                        groups,
                        ..
                    }) = self.steps.get(i)
                    {
                        pass.set_pipeline(pipeline);
                        pass.set_bind_group(0, bind_group, &[]);
                        pass.dispatch_workgroups(groups.0, groups.1, groups.2);
                        i += 1;
                    }
                }
                Step::Clear(b) => {
                    enc.clear_buffer(b, 0, None);
                    i += 1;
                }
                Step::Copy {
                    src,
                    src_offset,
                    dst,
                    dst_offset,
                    size,
                } => {
                    enc.copy_buffer_to_buffer(src, *src_offset, dst, *dst_offset, *size);
                    i += 1;
                }
            }
        }
    }

    /// Encode with a GPU timestamp before and after every dispatch (one pass per dispatch), into
    /// `query` slots `2k` and `2k + 1` for dispatch `k`. The query set needs
    /// `2 · dispatches()` slots.
    pub fn encode_timed(&self, enc: &mut wgpu::CommandEncoder, query: &wgpu::QuerySet) {
        let mut k = 0u32;
        for s in &self.steps {
            match s {
                Step::Dispatch {
                    key,
                    pipeline,
                    bind_group,
                    groups,
                } => {
                    let label = key.to_string();
                    let mut pass = enc.begin_compute_pass(&wgpu::ComputePassDescriptor {
                        label: Some(&label),
                        timestamp_writes: Some(wgpu::ComputePassTimestampWrites {
                            query_set: query,
                            beginning_of_pass_write_index: Some(2 * k),
                            end_of_pass_write_index: Some(2 * k + 1),
                        }),
                    });
                    pass.set_pipeline(pipeline);
                    pass.set_bind_group(0, bind_group, &[]);
                    pass.dispatch_workgroups(groups.0, groups.1, groups.2);
                    k += 1;
                }
                Step::Clear(b) => enc.clear_buffer(b, 0, None),
                Step::Copy {
                    src,
                    src_offset,
                    dst,
                    dst_offset,
                    size,
                } => enc.copy_buffer_to_buffer(src, *src_offset, dst, *dst_offset, *size),
            }
        }
    }
}
