//! Byte sources for the sample region: the mapped bytes themselves, or a zstd stream
//! decompressed window by window so that memory stays bounded whatever the file size.

use std::io::Read;
use std::sync::mpsc;

use super::error::FormatError;

/// A window of bytes that can be advanced and refilled.
pub trait ByteSource {
    /// The bytes currently available.
    fn window(&self) -> &[u8];
    /// Drops the first `consumed` bytes of the window and adds more. Returns `false`
    /// when the stream has ended (the window then holds all that is left).
    fn refill(&mut self, consumed: usize) -> Result<bool, FormatError>;
    /// True when the window already holds the whole rest of the stream.
    fn is_complete(&self) -> bool;
}

/// An uncompressed region: the window is the whole region, no copy.
pub struct SliceSource<'a> {
    data: &'a [u8],
}

impl<'a> SliceSource<'a> {
    pub fn new(data: &'a [u8]) -> Self {
        SliceSource { data }
    }
}

impl ByteSource for SliceSource<'_> {
    #[inline(always)]
    fn window(&self) -> &[u8] {
        self.data
    }
    fn refill(&mut self, consumed: usize) -> Result<bool, FormatError> {
        self.data = &self.data[consumed..];
        Ok(false)
    }
    fn is_complete(&self) -> bool {
        true
    }
}

/// Size of the decompressed window. Records are at most a few KiB except REPEAT
/// records, which the decoder reads entry by entry, so this bounds memory.
const ZSTD_WINDOW: usize = 1 << 20;

/// Maps a zstd library error to our error.
fn zstd_error(e: std::io::Error) -> FormatError {
    if e.kind() == std::io::ErrorKind::UnexpectedEof {
        FormatError::TruncatedZstd
    } else {
        let msg = e.to_string();
        if msg.contains("incomplete frame") || msg.contains("Read less bytes") {
            FormatError::TruncatedZstd
        } else {
            FormatError::Zstd(msg)
        }
    }
}

/// A zstd stream reader over `compressed`, set up as every reader of ours needs.
pub(crate) fn zstd_reader(
    compressed: &[u8],
) -> Result<zstd::stream::read::Decoder<'static, &[u8]>, FormatError> {
    // `with_buffer` reads straight from the slice; concatenated frames are read one
    // after the other, as CPython's reader accepts them.
    let mut decoder = zstd::stream::read::Decoder::with_buffer(compressed)
        .map_err(|e| FormatError::Zstd(e.to_string()))?;
    // CPython's writer uses a 2 MiB window; accept what zstd itself accepts by default
    // plus headroom for other writers, but never unbounded.
    decoder
        .window_log_max(31)
        .map_err(|e| FormatError::Zstd(e.to_string()))?;
    Ok(decoder)
}

/// Decompresses on the calling thread.
pub struct ZstdSource<'a> {
    decoder: zstd::stream::read::Decoder<'static, &'a [u8]>,
    buf: Vec<u8>,
    start: usize,
    end: usize,
    done: bool,
}

impl<'a> ZstdSource<'a> {
    pub fn new(compressed: &'a [u8]) -> Result<Self, FormatError> {
        let decoder = zstd_reader(compressed)?;
        // Small regions get a small window: no point zeroing a megabyte for a few KiB.
        let window = compressed.len().saturating_mul(8).clamp(4096, ZSTD_WINDOW);
        Ok(ZstdSource {
            decoder,
            buf: vec![0; window],
            start: 0,
            end: 0,
            done: compressed.is_empty(),
        })
    }
}

impl ByteSource for ZstdSource<'_> {
    #[inline(always)]
    fn window(&self) -> &[u8] {
        &self.buf[self.start..self.end]
    }
    fn refill(&mut self, consumed: usize) -> Result<bool, FormatError> {
        self.start += consumed;
        if self.done {
            return Ok(false);
        }
        // Move what is left to the front, then fill the rest.
        self.buf.copy_within(self.start..self.end, 0);
        self.end -= self.start;
        self.start = 0;
        while self.end < self.buf.len() {
            let n = self
                .decoder
                .read(&mut self.buf[self.end..])
                .map_err(zstd_error)?;
            if n == 0 {
                self.done = true;
                return Ok(false);
            }
            self.end += n;
        }
        Ok(true)
    }
    fn is_complete(&self) -> bool {
        self.done
    }
}

/// Decompresses on a helper thread and hands over full windows through a channel, so
/// decompression and record decoding run on two cores at once.
pub struct ThreadedZstdSource {
    rx: mpsc::Receiver<Result<Vec<u8>, FormatError>>,
    recycle: mpsc::SyncSender<Vec<u8>>,
    current: Vec<u8>,
    start: usize,
    done: bool,
    _worker: Option<std::thread::JoinHandle<()>>,
}

impl ThreadedZstdSource {
    /// `compressed` must be `'static` to cross threads: callers pass an `Arc`'d map.
    pub fn new<D>(data: D) -> Self
    where
        D: AsRef<[u8]> + Send + 'static,
    {
        // Two windows in flight: one being decoded, one being filled.
        let (tx, rx) = mpsc::sync_channel::<Result<Vec<u8>, FormatError>>(2);
        let (recycle, recycled) = mpsc::sync_channel::<Vec<u8>>(4);
        let worker = std::thread::Builder::new()
            .name("tach-zstd".into())
            .spawn(move || {
                let compressed = data.as_ref();
                let mut source = match ZstdSource::new(compressed) {
                    Ok(s) => s,
                    Err(e) => {
                        let _ = tx.send(Err(e));
                        return;
                    }
                };
                loop {
                    let mut out = recycled.try_recv().unwrap_or_default();
                    out.clear();
                    let more = match source.refill(source.window().len()) {
                        Ok(more) => more,
                        Err(e) => {
                            let _ = tx.send(Err(e));
                            return;
                        }
                    };
                    out.extend_from_slice(source.window());
                    if !out.is_empty() && tx.send(Ok(out)).is_err() {
                        return;
                    }
                    if !more {
                        return;
                    }
                }
            })
            .ok();
        ThreadedZstdSource {
            rx,
            recycle,
            current: Vec::new(),
            start: 0,
            done: false,
            _worker: worker,
        }
    }
}

impl ByteSource for ThreadedZstdSource {
    #[inline(always)]
    fn window(&self) -> &[u8] {
        &self.current[self.start..]
    }
    fn refill(&mut self, consumed: usize) -> Result<bool, FormatError> {
        self.start += consumed;
        if self.done {
            return Ok(false);
        }
        match self.rx.recv() {
            Ok(Ok(next)) => {
                // Keep the unconsumed tail in front of the new window.
                let mut merged = Vec::with_capacity(self.current.len() - self.start + next.len());
                merged.extend_from_slice(&self.current[self.start..]);
                merged.extend_from_slice(&next);
                let old = std::mem::replace(&mut self.current, merged);
                let _ = self.recycle.try_send(old);
                let _ = self.recycle.try_send(next);
                self.start = 0;
                Ok(true)
            }
            Ok(Err(e)) => {
                self.done = true;
                Err(e)
            }
            Err(mpsc::RecvError) => {
                self.done = true;
                Ok(false)
            }
        }
    }
    fn is_complete(&self) -> bool {
        self.done
    }
}
