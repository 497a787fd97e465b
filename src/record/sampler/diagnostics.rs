//! Why samples were dropped and stack reads taken again, counted by reason (a handful
//! of distinct ones) and, with `TACH_RECORD_DEBUG=1`, printed when the recording ends:
//! what diagnosing a recorder needs, kept off the hot path otherwise.

use crate::record::process::memory::ReadError;

/// The sampler's counts of what went wrong, by reason.
#[derive(Debug, Default)]
pub(super) struct Diagnostics {
    /// `TACH_RECORD_DEBUG` is set: reasons of retries are counted, and everything is
    /// printed at the end.
    debug: bool,
    drops: Vec<(ReadError, u64)>,
    /// Stack reads taken again because the first did not validate.
    retries: u64,
    retry_reasons: Vec<(ReadError, u64)>,
}

impl Diagnostics {
    pub fn new(debug: bool) -> Self {
        Diagnostics {
            debug,
            ..Diagnostics::default()
        }
    }

    pub fn debug(&self) -> bool {
        self.debug
    }

    /// A sample was dropped because of `e`.
    pub fn dropped(&mut self, e: ReadError) {
        count_reason(&mut self.drops, e);
    }

    /// A stack read is taken again because of `e`.
    pub fn retried(&mut self, e: ReadError) {
        self.retries += 1;
        if self.debug {
            count_reason(&mut self.retry_reasons, e);
        }
    }

    /// The lines `TACH_RECORD_DEBUG=1` prints at the end (nothing without it).
    pub fn report(&self) -> Vec<String> {
        if !self.debug {
            return Vec::new();
        }
        let mut out = vec![format!("{} stack reads taken again", self.retries)];
        for (reason, n) in &self.retry_reasons {
            out.push(format!("read again {n} times: {reason}"));
        }
        for (reason, n) in &self.drops {
            out.push(format!("dropped {n} samples: {reason}"));
        }
        out
    }
}

fn count_reason(reasons: &mut Vec<(ReadError, u64)>, e: ReadError) {
    match reasons.iter_mut().find(|(r, _)| *r == e) {
        Some((_, n)) => *n += 1,
        None => reasons.push((e, 1)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasons_are_counted_once_each_and_reported_only_when_debugging() {
        let mut d = Diagnostics::new(true);
        d.dropped(ReadError::Null);
        d.dropped(ReadError::Null);
        d.retried(ReadError::Invalid("moved"));
        assert_eq!(
            d.report(),
            [
                "1 stack reads taken again".to_string(),
                format!("read again 1 times: {}", ReadError::Invalid("moved")),
                format!("dropped 2 samples: {}", ReadError::Null),
            ]
        );
        let mut quiet = Diagnostics::new(false);
        quiet.dropped(ReadError::Null);
        quiet.retried(ReadError::Null);
        assert!(quiet.report().is_empty());
    }
}
