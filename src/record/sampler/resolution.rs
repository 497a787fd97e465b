//! Resolution: the walked frames' code objects (read in one batch, checked against the
//! code cache's fingerprints) to the writer's frame indices, with locations and opcodes.

use super::stack::{FRAME_OWNED_BY_GENERATOR, GC_MARK, TASK_MARK};
use super::Sampler;
use crate::record::interpreter::layout::{LineTableFormat, Offsets};
use crate::record::interpreter::linetable;
use crate::record::interpreter::resolve::Fingerprint;
use crate::record::process::memory::ReadError;

impl Sampler {
    /// Turns the raw frames into writer frame indices in `self.stack.frames`.
    pub(super) fn resolve_stack(&mut self, o: &Offsets) -> Result<(), ReadError> {
        self.stack.frames.clear();
        self.stack.frame_runs.clear();
        self.stack.number_runs(o.frame.is_object);
        self.stack.thread_runs = self.stack.run_count;
        if self.stack.raw.is_empty() {
            self.stack.tasks_at = 0;
            return Ok(());
        }
        self.stack.tasks_at = usize::MAX;
        let hsize = o.code.header_size as usize;
        // Opcodes at the instruction pointer, when the version has no caches to skip.
        let read_units = self.opts.opcodes
            && self
                .target
                .opcodes
                .as_ref()
                .is_some_and(|t| t.caches.is_none());
        let units_at = self.code_batch.read(
            &self.stack.raw,
            o,
            &self.cache,
            &*self.target.mem,
            read_units,
        )?;
        let opcode_tables = if self.opts.opcodes {
            self.target.opcodes.as_ref()
        } else {
            None
        };
        // (code, instr, frame index or None if left out, on a return instruction) of the
        // previous frame: deep recursion repeats the same frame many times.
        let mut last: Option<(u64, u64, Option<u32>, bool)> = None;
        let gc_id = self.gc.frame_id();
        let returning = |stack: &mut Vec<u32>, runs: &mut Vec<u32>| {
            // A frame on its return instruction has unlinked its callees: the frames
            // above it in the chain were read after the thread had left them.
            let mut keep = stack.iter().map(|&id| Some(id) == gc_id);
            runs.retain(|_| keep.next().unwrap_or(false));
            stack.retain(|&id| Some(id) == gc_id);
        };
        // Index of the frame's code unit in the batched read (GC marks have none).
        let mut unit = 0usize;
        for i in 0..self.stack.raw.len() {
            self.stack.mark_tasks(i);
            let f = self.stack.raw[i];
            if f.code == TASK_MARK {
                let id = self.tasks.task_frame(f.instr, &mut self.writer);
                self.stack.frames.push(id);
                continue;
            }
            if f.code == GC_MARK {
                let id = self.gc.intern(&mut self.writer);
                self.stack.frames.push(id);
                self.stack.frame_runs.push(self.stack.raw_runs[i]);
                continue;
            }
            let unit_at = units_at + 2 * unit;
            unit += 1;
            if let Some((c, ip, id, on_return)) = last {
                if c == f.code && ip == f.instr && !read_units {
                    if on_return && f.called_python {
                        returning(&mut self.stack.frames, &mut self.stack.frame_runs);
                    }
                    if let Some(id) = id {
                        self.stack.frames.push(id);
                        self.stack.frame_runs.push(self.stack.raw_runs[i]);
                    }
                    continue;
                }
            }
            last = Some((f.code, f.instr, None, false));
            let (code_start, code_len) = self.code_batch.code_of(i);
            let header = &self.code_batch.header[code_start..code_start + hsize];
            let fp = Fingerprint::from_header(o, &self.target.types, header)?;
            let entry = self.cache.get(
                &*self.target.mem,
                o,
                &self.target.types,
                f.code,
                header,
                fp,
                &self.opts.hidden_prefixes,
                // Always, where there are any: 3.11's instruction starts (below).
                self.target.opcodes.as_ref(),
            )?;
            let index = if o.frame.is_object {
                // `f_lasti`: in bytes in 3.9, in code units from 3.10; -1 before the
                // frame's first instruction (its first line, below).
                let lasti = f.instr as i64;
                match o.code.line_table {
                    LineTableFormat::Lnotab if lasti >= 0 => lasti / 2,
                    _ => lasti.max(-1),
                }
            } else {
                let start = f.code.wrapping_add(o.code.adaptive);
                (f.instr.wrapping_sub(start) as i64).div_euclid(2)
            };
            if o.frame.instr_is_prev {
                // 3.11: a frame not yet past RESUME is incomplete (the interpreter hides
                // it from tracebacks too); generator frames are always complete.
                let first = entry.first_traceable.unwrap_or(0) as i64;
                if f.owner != FRAME_OWNED_BY_GENERATOR && index < first {
                    continue;
                }
            }
            let not_started = o.frame.is_object && index == -1;
            if !not_started && (index < 0 || index as u64 >= entry.code_units) {
                return Err(ReadError::Invalid("instruction pointer outside its code"));
            }
            // The code unit at the instruction, when the bytecode was read with the header
            // (none for a frame object not started, index -1).
            let unit_byte = usize::try_from(index).map_or(usize::MAX, |i| hsize + 2 * i);
            // 3.11: a caller's instruction pointer rests on the last cache entry of its
            // call (CALL, or BINARY_SUBSCR calling a class's __getitem__), whose low byte
            // is data (a function version...) and may equal RETURN_VALUE's opcode: only
            // an instruction start can be a return instruction.
            let at_instruction = entry
                .instr_starts
                .as_ref()
                .and_then(|s| s.get(index as usize))
                .is_none_or(|&(start, _)| i64::from(start) == index);
            let on_return = match o.frame.return_opcodes {
                Some(ops) if at_instruction && unit_byte < code_len => {
                    ops.contains(&u16::from(self.code_batch.header[code_start + unit_byte]))
                }
                _ => false,
            };
            if on_return && f.called_python {
                returning(&mut self.stack.frames, &mut self.stack.frame_runs);
            }
            last = Some((f.code, f.instr, None, on_return));
            if entry.hidden {
                continue;
            }
            // -1 (a frame object not started) is u32::MAX: a key of its own.
            let index = index as u32;
            let opcode = match opcode_tables {
                None => 255u8,
                Some(t) => match &entry.instr_starts {
                    Some(starts) => starts.get(index as usize).map(|s| s.1).unwrap_or(255),
                    None => {
                        let unit = header_unit(&self.code_batch.header, unit_at);
                        t.deopt[unit as usize]
                    }
                },
            };
            let key = (index, opcode);
            let id = match entry.frames.get(&key) {
                Some(&id) => id,
                None => {
                    let first = entry.fingerprint.firstlineno;
                    let loc = match o.code.line_table {
                        LineTableFormat::Locations => {
                            linetable::locate(&entry.linetable, first, index)
                        }
                        format => linetable::locate_line(
                            format,
                            &entry.linetable,
                            first,
                            i64::from(index as i32),
                        ),
                    }
                    .filter(|l| l.lineno != -1);
                    let op = (opcode != 255).then_some(opcode);
                    let id = self.writer.frame(&entry.filename, &entry.qualname, loc, op);
                    entry.frames.insert(key, id);
                    id
                }
            };
            self.stack.frames.push(id);
            self.stack.frame_runs.push(self.stack.raw_runs[i]);
            last = Some((f.code, f.instr, Some(id), on_return));
        }
        if self.stack.tasks_at == usize::MAX {
            self.stack.tasks_at = self.stack.frames.len();
        }
        Ok(())
    }
}

fn header_unit(buf: &[u8], at: usize) -> u8 {
    buf.get(at).copied().unwrap_or(0)
}
