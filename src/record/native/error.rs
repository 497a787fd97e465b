//! Why native stacks cannot be read: the error of every part of `native`.

/// Why native stacks cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum NativeError {
    #[error("cannot read /proc/{pid}/maps: {source}")]
    Maps {
        pid: i32,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: {what}")]
    Module { path: String, what: String },
    #[error("thread {tid}: cannot read its registers: {}", std::io::Error::from_raw_os_error(*errno))]
    Registers { tid: i32, errno: i32 },
    #[error("native stacks are read on x86-64 Linux only")]
    Unsupported,
}
