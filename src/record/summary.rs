//! The line printed when a recording ends, the same from Python and from the command
//! line.

use super::sampler::RecordStats;

/// `1234567` as `1,234,567`.
fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

fn size(n: u64) -> String {
    let mut v = n as f64;
    for unit in ["B", "KiB", "MiB"] {
        if v < 1024.0 {
            return if unit == "B" {
                format!("{v:.0} B")
            } else {
                format!("{v:.1} {unit}")
            };
        }
        v /= 1024.0;
    }
    format!("{v:.1} GiB")
}

impl RecordStats {
    /// The line printed when a recording ends, the same from Python and from the
    /// command line: samples, achieved rate, dropped samples, the sampler's CPU use, file
    /// size and path.
    pub fn summary_line(&self) -> String {
        let cpu = if self.duration_sec > 0.0 {
            100.0 * self.sampler_cpu_sec / self.duration_sec
        } else {
            0.0
        };
        // `--rotate`: the size is the finished segments' (some may have been deleted).
        let segments = match self.segments {
            0 => String::new(),
            1 => " in 1 segment".to_string(),
            n => format!(" in {} segments", thousands(n)),
        };
        format!(
            "tach: {} samples in {:.2} s ({:.1} Hz achieved), {} dropped ({:.2}% ticks with \
             errors, {:.2}% missed), sampler {:.1}% of a CPU, {}{segments} written to {}",
            thousands(self.samples),
            self.duration_sec,
            self.sample_rate,
            thousands(self.dropped),
            self.error_rate,
            self.missed_samples,
            cpu,
            size(self.file_size),
            self.path.display()
        ) + &match &self.native {
            Some(n) => {
                format!(
                    "; native: {} walks, {} cut short, {} not stopped, {} not spliced",
                    thousands(n.walks),
                    thousands(n.truncated),
                    thousands(n.no_registers),
                    thousands(n.mismatches)
                ) + &match n.threads_without_python {
                    0 => String::new(),
                    k => format!(
                        ", {k} thread{} without Python (native frames only)",
                        if k == 1 { "" } else { "s" }
                    ),
                }
            }
            None => String::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_numbers_read_as_the_python_side_prints_them() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1000), "1,000");
        assert_eq!(thousands(1234567), "1,234,567");
        assert_eq!(size(512), "512 B");
        assert_eq!(size(2048), "2.0 KiB");
        assert_eq!(size(5 << 20), "5.0 MiB");
        let s = RecordStats {
            path: "out.tach".into(),
            samples: 12345,
            duration_sec: 2.0,
            sample_rate: 999.5,
            sampler_cpu_sec: 0.1,
            file_size: 4096,
            ..RecordStats::default()
        };
        assert_eq!(
            s.summary_line(),
            "tach: 12,345 samples in 2.00 s (999.5 Hz achieved), 0 dropped (0.00% ticks \
             with errors, 0.00% missed), sampler 5.0% of a CPU, 4.0 KiB written to out.tach"
        );
    }
}
